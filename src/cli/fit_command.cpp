// `mist fit`: least-squares fit of the op-time model's efficiency constants (matmul fraction of
// peak, memory-bandwidth fraction, per-kernel launch cost) for one device from the measured op rows
// of a profile database (as samples: profile/fit_samples.hpp); prints them with their residuals and
// writes the constants file a cluster's "time_constants" field applies (docs/time-model.md,
// "Fitting the op constants"). With --runs instead, the matmul efficiency of a stack from published
// iteration times (cli/fit_runs.cpp); with --gemm-table, the GEMM constants (cli/fit_gemm_table.cpp).
#include <filesystem>

#include <fmt/format.h>

#include "cli/command.hpp"
#include "cli/commands.hpp"
#include "cli/fit_gemm_table.hpp"
#include "cli/fit_output.hpp"
#include "cli/fit_runs.hpp"
#include "cli/job.hpp"
#include "hardware/fit.hpp"
#include "profile/database.hpp"
#include "profile/fit_samples.hpp"
#include "spec/catalog.hpp"
#include "spec/cluster.hpp"

namespace mist::cli {

namespace {

struct FitArgs {
  std::string db, gpu, device, dtype = "", out;
  int test_every = 0;
  bool json = false, residuals = false;
  FitRunsArgs runs;
  std::string gemm_table;
};

Result<spec::GpuSpec> fit_gpu(const std::string& name_or_file) {
  if (name_or_file.ends_with(".json")) {
    auto j = read_json_file(name_or_file);
    if (!j) return fail("--gpu", j.error().to_string());
    return spec::detail::gpu_from_json(*j, "--gpu", nullptr);
  }
  auto g = spec::catalog_gpu(name_or_file);
  if (!g) return fail("--gpu", g.error().message);
  return g;
}

std::string pct(double x) { return fmt::format("{:.1f}%", 100 * x); }

int run_fit(const FitArgs& a, std::string& out, std::string& err) {
  if (!a.gemm_table.empty()) {
    if (!a.db.empty() || !a.runs.runs.empty() || !a.runs.test_runs.empty() || !a.device.empty() || a.test_every ||
        a.residuals)
      return invalid_input(err, Error{"--gemm-table", "takes --gpu, --dtype, --out and --json only"});
    return run_fit_gemm_table({a.gemm_table, a.gpu, a.dtype, a.out, a.json}, out, err);
  }
  if (a.db.empty() == a.runs.runs.empty())
    return invalid_input(err, Error{"--profile-db", "give one of --profile-db (measured op times) and --runs "
                                                    "(published iteration times)"});
  if (!a.runs.runs.empty()) {
    if (!a.gpu.empty() || !a.device.empty() || !a.dtype.empty() || a.test_every || a.residuals)
      return invalid_input(err, Error{"--runs", "takes the GPU and precision from the runs; --gpu, --device, --dtype, "
                                                "--test-every and --residuals belong to --profile-db"});
    FitRunsArgs r = a.runs;
    r.out = a.out;
    r.json = a.json;
    return run_fit_runs(r, out, err);
  }
  if (!a.runs.test_runs.empty()) return invalid_input(err, Error{"--test-runs", "needs --runs"});
  if (a.runs.hold_out_half >= 0) return invalid_input(err, Error{"--hold-out-half", "needs --runs"});
  if (a.runs.host) return invalid_input(err, Error{"--host", "needs --runs"});
  if (a.gpu.empty()) return invalid_input(err, Error{"--gpu", "is required with --profile-db"});
  auto gpu = fit_gpu(a.gpu);
  if (!gpu) return invalid_input(err, gpu.error());
  const std::string device = a.device.empty() ? gpu->name : a.device;
  // Opening would create a missing file; a fit needs measurements.
  if (!std::filesystem::exists(a.db))
    return invalid_input(err, Error{"--profile-db", "no such file: " + a.db});
  auto db = profile::Database::open(a.db);
  if (!db) return invalid_input(err, Error{"--profile-db", db.error().message});
  auto rows = db->all();
  if (!rows) return invalid_input(err, Error{"--profile-db", rows.error().message});
  // The dtype: as given, else the most common one among this device's rows.
  const auto common = profile::most_common_dtype(*rows, device);
  if (!common)
    return invalid_input(err,
                         Error{"--device", fmt::format("the profile database has no rows for device '{}'", device)});
  const std::string dtype_name = a.dtype.empty() ? *common : a.dtype;
  auto dtype = parse_dtype(dtype_name);
  if (!dtype) return invalid_input(err, dtype.error());

  const auto [samples, skipped] = profile::samples_of(*rows, device, dtype_name, *gpu, *dtype);
  // Held-out shapes: every n-th distinct shape key is kept out of the fit and scored apart.
  const auto [train, test, held] = profile::hold_out(samples, a.test_every);

  auto fitted = hardware::fit_constants(train);
  if (!fitted)
    return invalid_input(err, Error{"--profile-db." + fitted.error().path, fitted.error().message});
  const hardware::PerfConstants defaults;
  const auto test_before = hardware::relative_errors(test, defaults);
  const auto test_after = hardware::relative_errors(test, fitted->constants);

  Json prov = {{"command", "mist fit"}, {"profile_db", a.db}, {"date", fit_date()}, {"skipped_rows", skipped},
               {"held_out_rows", test_after.rows}};
  if (test_after.rows > 0) {
    prov["held_out_median_rel_error"] = test_after.median;
    prov["held_out_median_rel_error_defaults"] = test_before.median;
  }
  const Json constants = hardware::constants_to_json(*fitted, gpu->name, device, dtype_name, prov);
  if (auto done = emit_constants(constants, a.out, a.json, out, err)) return *done;
  const auto& c = fitted->constants;
  out += fmt::format("fitted op-time constants for {} (rows of device '{}', {}; {} rows used, {} skipped)\n",
                     gpu->name, device, dtype_name, fitted->after.rows, skipped);
  out += fmt::format("  matmul_efficiency  {:.4f} of the dense peak (default: {})\n", c.matmul_efficiency,
                     gpu->matmul_bf16_flops > 0 ? "the catalog's MAMF" : fmt::format("{}", defaults.default_matmul_efficiency));
  out += fmt::format("  hbm_efficiency     {}\n", fitted->fitted_hbm ? fmt::format("{:.4f} of peak bandwidth", c.hbm_efficiency)
                                                                      : "not fitted (the rows do not determine it): default");
  out += fmt::format("  kernel_launch_s    {}\n", fitted->fitted_launch ? fmt::format("{:.3g} s", c.kernel_launch_s)
                                                                         : "not fitted (rows do not determine it): default");
  out += fmt::format("  vector_TFLOPS      {}\n", fitted->fitted_vector
                                                   ? fmt::format("{:.4g} (elementwise math of memory-bound ops)", c.vector_flops / 1e12)
                                                   : "not fitted (the rows do not need it): elementwise math never binds");
  auto fa = [&](bool fitted, double e) {
    return fitted ? fmt::format("{:.4f} of the dense peak", e) : std::string("not fitted (no flash-attention rows): default");
  };
  out += fmt::format("  flash_fwd_eff      {}\n", fa(fitted->fitted_flash_fwd, c.flash_fwd_efficiency));
  out += fmt::format("  flash_bwd_eff      {}\n", fa(fitted->fitted_flash_bwd, c.flash_bwd_efficiency));
  out += fmt::format("relative error on the rows used: median {} max {} (defaults: median {} max {})\n",
                     pct(fitted->after.median), pct(fitted->after.max), pct(fitted->before.median),
                     pct(fitted->before.max));
  if (test_after.rows > 0)
    out += fmt::format("held-out shapes ({} rows): median {} max {} (defaults: median {} max {})\n", test_after.rows,
                       pct(test_after.median), pct(test_after.max), pct(test_before.median), pct(test_before.max));
  if (a.residuals) {
    out += "row (op pass shape)  measured_s  fitted_s  error  [held out]\n";
    for (const auto& s : samples) {
      const double p = hardware::predict(s, c);
      out += fmt::format("{}  {:.3g}  {:.3g}  {:+.1f}%{}\n", s.label, s.seconds, p, 100 * (p - s.seconds) / s.seconds,
                         held.contains(s.group) ? "  held out" : "");
    }
  }
  if (!a.out.empty()) out += fmt::format("wrote {} (a cluster's \"time_constants\" uses it)\n", a.out);
  return kExitOk;
}

}  // namespace

std::vector<Command> add_fit_command(CLI::App& app) {
  auto a = std::make_shared<FitArgs>();
  auto* sub = app.add_subcommand(
      "fit", "fit the op-time model's constants to measured op times, or its matmul efficiency to published runs");
  sub->add_option("--profile-db", a->db, "the profile database with measured op rows (docs/profile.md)");
  sub->add_option("--runs", a->runs.runs,
                  "instead: published iteration times as mist jobs (data/published/*.json); "
                  "fits the matmul efficiency");
  sub->add_option("--test-runs", a->runs.test_runs, "with --runs: runs held out of the fit, scored before and after");
  sub->add_option("--hold-out-half", a->runs.hold_out_half,
                  "with --runs: fit on a half of the runs (chosen by this seed), score the other half")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  sub->add_flag("--host", a->runs.host,
                "with --runs: fit the stack's host cost per kernel with the efficiency (runs with host-bound layers)");
  sub->add_option("--gemm-table", a->gemm_table,
                  "instead: measured GEMMs (CSV: b,m,n,k and seconds or flops_per_s); fits the GEMM model's "
                  "tile cost in k, rate and launch cost");
  sub->add_option("--gpu", a->gpu,
                  "with --profile-db or --gemm-table: catalog GPU name, or a GPU definition JSON file "
                  "(for the CPU: its peaks)");
  sub->add_option("--device", a->device, "the rows' device name (default: the GPU's name; 'cpu' for mist profile)");
  sub->add_option("--dtype", a->dtype, "fp32, bf16 or fp16 (default: the dtype most rows have)");
  sub->add_option("--out", a->out, "write the constants file here");
  sub->add_option("--test-every", a->test_every, "hold out every n-th shape and report the error on it")
      ->check(CLI::Range(0, 1000));
  sub->add_flag("--json", a->json, "print the constants file as JSON");
  sub->add_flag("--residuals", a->residuals, "also print every row: measured, fitted, relative error");
  return {{sub, [a](std::string& out, std::string& err) { return run_fit(*a, out, err); }}};
}

}  // namespace mist::cli
