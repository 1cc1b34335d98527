// The table: '#' lines (its provenance, copied into the constants file), then a header naming at
// least b, m, n, k and one of seconds or flops_per_s, then one GEMM per line. Every row is a
// sample of the analytical GEMM time (hardware/fit.hpp); the fit is fit_constants with the tiles'
// fixed cost as an unknown.
#include "cli/fit_gemm_table.hpp"

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/fit_output.hpp"
#include "cli/job.hpp"
#include "hardware/fit.hpp"
#include "hardware/op_cost.hpp"
#include "spec/catalog.hpp"

namespace mist::cli {

namespace {

struct Table {
  std::vector<hardware::FitSample> samples;
  std::vector<std::string> comments;
};

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> cells;
  std::stringstream ss(line);
  for (std::string c; std::getline(ss, c, ',');) cells.push_back(c);
  if (!line.empty() && line.back() == ',') cells.push_back("");
  return cells;
}

Result<double> number(const std::string& cell, const std::string& where, double lo, double hi) {
  double v = 0;
  size_t used = 0;
  try {
    v = std::stod(cell, &used);
  } catch (...) {
    used = 0;
  }
  if (used == 0 || used != cell.size() || !std::isfinite(v) || v < lo || v > hi)
    return fail(where, fmt::format("must be a number in [{:g}, {:g}], got '{}'", lo, hi, cell));
  return v;
}

Result<Table> read_table(const std::string& file, const spec::GpuSpec& g, spec::Dtype d) {
  std::ifstream in(file);
  if (!in) return fail("--gemm-table", "cannot read " + file);
  Table t;
  std::map<std::string, size_t> col;
  std::string line;
  for (int no = 1; std::getline(in, line); ++no) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    if (line[0] == '#') {
      t.comments.push_back(line.substr(1));
      continue;
    }
    const auto cells = split(line);
    const std::string at = fmt::format("--gemm-table: {} line {}", file, no);
    if (col.empty()) {
      for (size_t i = 0; i < cells.size(); ++i) col[cells[i]] = i;
      for (const char* need : {"b", "m", "n", "k"})
        if (!col.contains(need)) return fail(at, fmt::format("the header has no column '{}'", need));
      if (col.contains("seconds") == col.contains("flops_per_s"))
        return fail(at, "the header needs exactly one of the columns 'seconds' and 'flops_per_s'");
      continue;
    }
    if (cells.size() != col.size())
      return fail(at, fmt::format("has {} fields, the header {}", cells.size(), col.size()));
    double dim[4];
    const char* names[4] = {"b", "m", "n", "k"};
    for (int i = 0; i < 4; ++i) {
      MIST_TRY(dim[i], number(cells[col[names[i]]], at + "." + names[i], 1, 1e7));
      if (dim[i] != std::floor(dim[i])) return fail(at + "." + names[i], "must be a whole number");
    }
    const double flops = 2 * dim[0] * dim[1] * dim[2] * dim[3];
    double seconds = 0;
    if (col.contains("seconds")) {
      MIST_TRY(seconds, number(cells[col["seconds"]], at + ".seconds", 1e-9, 1e4));
    } else {
      MIST_TRY(double rate, number(cells[col["flops_per_s"]], at + ".flops_per_s", 1e6, 1e17));
      seconds = flops / rate;
    }
    hardware::FitSample s;
    s.label = fmt::format("b={} m={} n={} k={}", dim[0], dim[1], dim[2], dim[3]);
    s.group = s.label;
    s.seconds = seconds;
    hardware::add_kernel(s, g, hardware::GemmKernel{dim[0], dim[1], dim[2], dim[3], d});
    t.samples.push_back(s);
  }
  if (t.samples.empty()) return fail("--gemm-table", file + " has no GEMM rows");
  return t;
}

std::string pct(double x) { return fmt::format("{:.1f}%", 100 * x); }

}  // namespace

int run_fit_gemm_table(const FitGemmTableArgs& a, std::string& out, std::string& err) {
  if (a.gpu.empty()) return invalid_input(err, Error{"--gpu", "is required with --gemm-table"});
  auto gpu = spec::catalog_gpu(a.gpu);
  if (!gpu) return invalid_input(err, Error{"--gpu", gpu.error().message});
  const std::string dtype_name = a.dtype.empty() ? "bf16" : a.dtype;
  auto dtype = parse_dtype(dtype_name);
  if (!dtype) return invalid_input(err, dtype.error());
  auto table = read_table(a.table, *gpu, *dtype);
  if (!table) return invalid_input(err, table.error());
  auto fitted = hardware::fit_constants(table->samples, {}, /*fit_k_overhead=*/true);
  if (!fitted) return invalid_input(err, Error{"--gemm-table." + fitted.error().path, fitted.error().message});

  std::string source;
  for (const auto& c : table->comments) {
    const auto text = c.find_first_not_of(' ');  // a bare "#" line adds nothing
    if (text != std::string::npos) source += (source.empty() ? "" : " ") + c.substr(text);
  }
  const Json prov = {{"command", "mist fit --gemm-table"}, {"gemm_table", a.table}, {"date", fit_date()},
                     {"source", source}};
  const Json constants = hardware::constants_to_json(*fitted, gpu->name, gpu->name, dtype_name, prov);
  if (auto done = emit_constants(constants, a.out, a.json, out, err)) return *done;
  const auto& c = fitted->constants;
  out += fmt::format("GEMM constants of {} in {} fitted to {} measured GEMMs ({})\n", gpu->name, dtype_name,
                     fitted->after.rows, a.table);
  out += fmt::format("  gemm_k_overhead    {:.1f} (each tile costs k + this of steady main loop)\n", c.gemm_k_overhead);
  out += fmt::format("  matmul_efficiency  {:.4f} of the dense peak (this table's stack; not applied by default)\n",
                     c.matmul_efficiency);
  out += fmt::format("  kernel_launch_s    {}\n", fitted->fitted_launch ? fmt::format("{:.3g} s", c.kernel_launch_s)
                                                                         : std::string("not fitted: default"));
  out += fmt::format("  hbm_efficiency     {}\n", fitted->fitted_hbm ? fmt::format("{:.4f}", c.hbm_efficiency)
                                                                      : std::string("not fitted: default"));
  out += fmt::format("relative error: median {} max {} mean {} (defaults: median {} max {} mean {})\n",
                     pct(fitted->after.median), pct(fitted->after.max), pct(fitted->after.mean),
                     pct(fitted->before.median), pct(fitted->before.max), pct(fitted->before.mean));
  if (!a.out.empty()) out += fmt::format("wrote {}\n", a.out);
  return kExitOk;
}

}  // namespace mist::cli
