#include "profile/gemm_table.hpp"

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "hardware/op_cost.hpp"

namespace mist::profile {

namespace {

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

}  // namespace

std::string GemmTable::source() const {
  std::string out;
  for (const auto& c : comments) {
    const auto text = c.find_first_not_of(' ');  // a bare "#" line adds nothing
    if (text != std::string::npos) out += (out.empty() ? "" : " ") + c.substr(text);
  }
  return out;
}

Result<GemmTable> parse_gemm_table(std::istream& in, const std::string& name, const spec::GpuSpec& g, spec::Dtype d) {
  GemmTable t;
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
    const std::string at = fmt::format("{} line {}", name, no);
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
  if (t.samples.empty()) return fail("", name + " has no GEMM rows");
  return t;
}

Result<GemmTable> read_gemm_table(const std::string& file, const spec::GpuSpec& g, spec::Dtype d) {
  std::ifstream in(file);
  if (!in) return fail("", "cannot read " + file);
  return parse_gemm_table(in, file, g, d);
}

}  // namespace mist::profile
