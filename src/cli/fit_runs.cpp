// `mist fit --runs`: the matmul efficiency that makes the time model reproduce published iteration
// times of one GPU and software stack (data/published/*.json), checked on held-out runs, written as
// the constants file a cluster's "time_constants" applies (docs/time-model.md, "Calibrating a stack").
#include "cli/fit_runs.hpp"

#include <cmath>

#include <fmt/format.h>

#include "calibration/published_runs.hpp"
#include "spec/engine.hpp"
#include "cli/commands.hpp"
#include "cli/fit_output.hpp"
#include "cli/job.hpp"
#include "hardware/fit.hpp"
#include "hardware/perf_model.hpp"

namespace mist::cli {

namespace {

hardware::ErrorStats stats(const std::vector<calibration::RunError>& e) {
  std::vector<double> abs;
  for (const auto& x : e) abs.push_back(std::fabs(x.error()));
  return hardware::error_stats(std::move(abs));
}

std::string pct(double x) { return fmt::format("{:+.1f}%", 100 * x); }
std::string abs_pct(double x) { return fmt::format("{:.1f}%", 100 * x); }

}  // namespace

int run_fit_runs(const FitRunsArgs& a, std::string& out, std::string& err) {
  auto runs = calibration::load_published_runs(a.runs);
  if (!runs) return invalid_input(err, Error{"--runs: " + runs.error().path, runs.error().message});
  const auto& gpu = runs->runs.front().job.cluster.gpu;
  const spec::Dtype dtype = runs->runs.front().job.training.precision;
  const std::string dtype_name = spec::to_string(dtype);
  // Held-out runs (checked before the fit): same GPU and precision, scored with the default and
  // the fitted constants.
  std::vector<calibration::PublishedRun> fit_runs = runs->runs, test_runs;
  std::string held_name = a.test_runs;
  if (a.hold_out_half >= 0) {
    if (!a.test_runs.empty()) return invalid_input(err, Error{"--hold-out-half", "give it or --test-runs, not both"});
    auto [fitted, held] = calibration::split_runs(runs->runs, static_cast<uint64_t>(a.hold_out_half));
    if (fitted.empty() || held.empty())
      return invalid_input(err, Error{"--hold-out-half", "the runs are too few to split in two"});
    fit_runs = std::move(fitted);
    test_runs = std::move(held);
    held_name = fmt::format("{} (the other half, seed {})", a.runs, a.hold_out_half);
  } else if (!a.test_runs.empty()) {
    auto test = calibration::load_published_runs(a.test_runs);
    if (!test) return invalid_input(err, Error{"--test-runs: " + test.error().path, test.error().message});
    for (const auto& r : test->runs)
      if (r.job.cluster.gpu.name != gpu.name || r.job.training.precision != dtype) {
        const auto why = fmt::format("'{}' runs on {} in {}, the fit is for {} in {}", r.name, r.job.cluster.gpu.name,
                                     spec::to_string(r.job.training.precision), gpu.name, dtype_name);
        return invalid_input(err, Error{"--test-runs", why});
      }
    test_runs = test->runs;
  }
  auto fit = a.host ? calibration::fit_efficiency_and_host(fit_runs) : calibration::fit_matmul_efficiency(fit_runs);
  if (!fit) return invalid_input(err, Error{"--runs: " + fit.error().path, fit.error().message});
  std::vector<calibration::RunError> held_before, held_after;
  if (!test_runs.empty()) {
    analysis::TimeConstants k;
    k.perf.matmul_efficiency = fit->matmul_efficiency;
    k.perf.host_per_kernel_s = fit->host_per_kernel_s;
    auto before = calibration::run_errors(test_runs);
    auto after = calibration::run_errors(test_runs, k);
    if (!before || !after)
      return invalid_input(err, Error{a.test_runs.empty() ? "--hold-out-half" : "--test-runs",
                                      (before ? after : before).error().to_string()});
    held_before = *before;
    held_after = *after;
  }

  hardware::FitResult r;
  r.constants.matmul_efficiency = fit->matmul_efficiency;
  r.fitted_matmul = true;
  r.before = stats(fit->before);
  r.after = stats(fit->after);
  const std::string fitted_name =
      a.hold_out_half >= 0 ? fmt::format("{} (a half, seed {})", a.runs, a.hold_out_half) : a.runs;
  Json prov = {{"command", a.host ? "mist fit --runs --host" : "mist fit --runs"}, {"runs", fitted_name},
               {"source", runs->source}, {"date", fit_date()},
               {"mean_rel_error", r.after.mean}, {"mean_rel_error_defaults", r.before.mean}};
  if (!held_after.empty()) {
    const auto hb = stats(held_before), ha = stats(held_after);
    prov["held_out"] = {{"runs", held_name}, {"count", ha.rows}, {"mean_rel_error", ha.mean},
                        {"max_rel_error", ha.max}, {"mean_rel_error_defaults", hb.mean},
                        {"max_rel_error_defaults", hb.max}};
  }
  Json constants = hardware::constants_to_json(r, gpu.name, gpu.name, dtype_name, prov);
  if (fit->fitted_host) constants["host_per_kernel_us"] = fit->host_per_kernel_s * 1e6;
  if (runs->engine) constants["engine"] = spec::to_string(*runs->engine);
  if (!runs->stack.empty()) constants["stack"] = runs->stack;
  if (auto done = emit_constants(constants, a.out, a.json, out, err)) return *done;
  const double mamf = hardware::achievable_matmul_flops(gpu, dtype) / hardware::sustained_matmul_flops(gpu, dtype);
  out += fmt::format("matmul efficiency of {} in {} fitted to {} published runs ({})\n", gpu.name, dtype_name,
                     fit->after.size(), a.runs);
  out += fmt::format("  source: {}\n", runs->source);
  out += fmt::format("  matmul_efficiency  {:.4f} of the dense peak (without it: {:.4f}, {})\n", fit->matmul_efficiency,
                     mamf, gpu.matmul_bf16_flops > 0 ? "the catalog's MAMF" : "the default efficiency");
  if (fit->fitted_host)
    out += fmt::format("  host_per_kernel    {:.2f} µs (what the stack's host spends issuing one kernel)\n",
                       fit->host_per_kernel_s * 1e6);
  out += "run  measured_s  predicted_s (default -> fitted)  throughput error (default -> fitted)\n";
  auto table = [&](const std::vector<calibration::RunError>& b, const std::vector<calibration::RunError>& f) {
    for (size_t i = 0; i < b.size(); ++i)
      out += fmt::format("  {:<14} {:>9.3f}  {:>9.3f} -> {:>9.3f}  {:>7} -> {:>7}\n", b[i].name, b[i].measured_s,
                         b[i].predicted_s, f[i].predicted_s, pct(b[i].error()), pct(f[i].error()));
    const auto sb = stats(b), sf = stats(f);
    out += fmt::format("  mean |error| {} -> {}, worst {} -> {}\n", abs_pct(sb.mean), abs_pct(sf.mean), abs_pct(sb.max),
                       abs_pct(sf.max));
  };
  table(fit->before, fit->after);
  if (!held_after.empty()) {
    out += fmt::format("held out ({}, not used by the fit):\n", held_name);
    table(held_before, held_after);
  }
  if (!a.out.empty()) out += fmt::format("wrote {} (a cluster's \"time_constants\" uses it)\n", a.out);
  return kExitOk;
}

}  // namespace mist::cli
