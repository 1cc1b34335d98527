// The table is read by profile/gemm_table.hpp (its '#' lines, the provenance, go into the constants
// file); the fit is fit_constants with the tiles' fixed cost as an unknown.
#include "cli/fit_gemm_table.hpp"

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/fit_output.hpp"
#include "cli/job.hpp"
#include "hardware/fit.hpp"
#include "profile/gemm_table.hpp"
#include "spec/catalog.hpp"

namespace mist::cli {

namespace {

std::string pct(double x) { return fmt::format("{:.1f}%", 100 * x); }

}  // namespace

int run_fit_gemm_table(const FitGemmTableArgs& a, std::string& out, std::string& err) {
  if (a.gpu.empty()) return invalid_input(err, Error{"--gpu", "is required with --gemm-table"});
  auto gpu = spec::catalog_gpu(a.gpu);
  if (!gpu) return invalid_input(err, Error{"--gpu", gpu.error().message});
  const std::string dtype_name = a.dtype.empty() ? "bf16" : a.dtype;
  auto dtype = parse_dtype(dtype_name);
  if (!dtype) return invalid_input(err, dtype.error());
  auto table = profile::read_gemm_table(a.table, *gpu, *dtype);
  if (!table) {
    const auto& e = table.error();
    return invalid_input(err, Error{e.path.empty() ? "--gemm-table" : "--gemm-table: " + e.path, e.message});
  }
  auto fitted = hardware::fit_constants(table->samples, {}, /*fit_k_overhead=*/true);
  if (!fitted) return invalid_input(err, Error{"--gemm-table." + fitted.error().path, fitted.error().message});

  const Json prov = {{"command", "mist fit --gemm-table"}, {"gemm_table", a.table}, {"date", fit_date()},
                     {"source", table->source()}};
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
