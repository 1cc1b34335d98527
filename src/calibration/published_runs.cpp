#include "calibration/published_runs.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include <fmt/format.h>

#include "analysis/prediction.hpp"
#include "hardware/perf_model.hpp"

namespace mist::calibration {

namespace {

// The plan's stages from "every_stage": the uniform split (earlier stages take the remainder, as
// plan::even_split), each stage a copy of every_stage; "ckpt_layers": "all" recomputes every block.
Result<Json> with_uniform_stages(const Json& plan, const Json& every, const spec::ModelSpec& m,
                                 const std::string& plan_path, const std::string& every_path) {
  MIST_TRY(JsonFields pf, JsonFields::of(plan, plan_path));
  MIST_TRY(int64_t pp, pf.integer("pp", 1, plan::kMaxPp));
  if (pp > m.num_layers)
    return fail(pf.field_path("pp"), fmt::format("{} stages for the model's {} layers", pp, m.num_layers));
  MIST_TRY(JsonFields ef, JsonFields::of(every, every_path));
  if (ef.has("num_layers"))
    return fail(ef.field_path("num_layers"), "is set by the uniform split; give the plan's stages instead");
  const bool all = ef.has("ckpt_layers") && ef.raw("ckpt_layers").is_string();
  if (all && ef.raw("ckpt_layers") != "all")
    return fail(ef.field_path("ckpt_layers"), "must be a number of blocks or \"all\"");
  Json out = plan;
  out["stages"] = Json::array();
  for (int64_t i = 0; i < pp; ++i) {
    Json s = every;
    s["num_layers"] = plan::even_split_layers(m.num_layers, pp, i);
    if (all) s["ckpt_layers"] = s["num_layers"];
    out["stages"].push_back(s);
  }
  return out;
}

Result<PublishedRun> run_from_json(const Json& j, const std::string& path,
                                   const std::map<std::string, spec::ModelSpec>& models) {
  MIST_TRY(JsonFields f, JsonFields::of(j, path));
  MIST_CHECK(f.reject_unknown({"name", "model", "cluster", "training", "plan", "every_stage", "iteration_time_s",
                               "reported", "comment"}));
  PublishedRun r;
  MIST_TRY(r.name, f.string("name"));
  if (!f.has("model")) return fail(f.field_path("model"), "is required but missing");
  const Json& mj = f.raw("model");
  if (mj.is_string()) {
    const std::string name = mj.get<std::string>();
    if (auto it = models.find(name); it != models.end()) {
      r.job.model = it->second;
    } else {
      auto cat = spec::catalog_model(name);
      if (!cat)
        return fail(f.field_path("model"), "'" + name + "' is neither in this file's models nor in the catalog");
      r.job.model = *cat;
    }
  } else {
    MIST_TRY(r.job.model, spec::model_from_json(mj, f.field_path("model")));
  }
  for (const char* key : {"cluster", "training", "plan"})
    if (!f.has(key)) return fail(f.field_path(key), "is required but missing");
  MIST_TRY(r.job.cluster, spec::cluster_from_json(f.raw("cluster"), f.field_path("cluster")));
  MIST_TRY(r.job.training, spec::training_from_json(f.raw("training"), f.field_path("training")));
  Json plan = f.raw("plan");
  if (f.has("every_stage")) {
    if (plan.is_object() && plan.contains("stages"))
      return fail(f.field_path("every_stage"), "cannot be used when the plan lists its stages");
    MIST_TRY(plan, with_uniform_stages(plan, f.raw("every_stage"), r.job.model, f.field_path("plan"),
                                       f.field_path("every_stage")));
  }
  MIST_TRY(r.job.plan, plan::plan_from_json(plan, f.field_path("plan")));
  MIST_TRY(r.iteration_time_s, f.number("iteration_time_s", 1e-9, 1e9));
  if (auto ok = plan::validate_plan(r.job.plan, r.job.model, r.job.cluster, r.job.training); !ok)
    return fail(path + "." + ok.error().path, ok.error().message);
  return r;
}

}  // namespace

Result<PublishedRuns> published_runs_from_json(const Json& j, const std::string& what) {
  MIST_TRY(JsonFields f, JsonFields::of(j, what));
  MIST_CHECK(f.reject_unknown({"published_runs_version", "source", "comment", "engine", "stack", "models", "runs"}));
  MIST_TRY(int64_t version, f.integer("published_runs_version", 1, 1));
  (void)version;
  PublishedRuns out;
  MIST_TRY(out.source, f.string("source"));
  if (f.has("engine")) {
    MIST_TRY(std::string engine, f.string("engine"));
    auto e = spec::engine_from_string(engine);
    if (!e) return fail(f.field_path("engine"), e.error().message);
    out.engine = *e;
  }
  MIST_TRY(out.stack, f.string_or("stack", ""));
  std::map<std::string, spec::ModelSpec> models;
  if (f.has("models")) {
    const Json& ms = f.raw("models");
    if (!ms.is_object()) return fail(f.field_path("models"), "must be an object of named model forms");
    for (const auto& [name, form] : ms.items()) {
      MIST_TRY(auto m, spec::model_from_json(form, f.field_path("models") + "." + name));
      models.emplace(name, m);
    }
  }
  if (!f.has("runs") || !f.raw("runs").is_array() || f.raw("runs").empty())
    return fail(f.field_path("runs"), "must be a non-empty array of runs");
  const Json& runs = f.raw("runs");
  for (size_t i = 0; i < runs.size(); ++i) {
    MIST_TRY(auto r, run_from_json(runs[i], fmt::format("{}[{}]", f.field_path("runs"), i), models));
    out.runs.push_back(std::move(r));
  }
  return out;
}

Result<PublishedRuns> load_published_runs(const std::string& path) {
  return load_json_as(path, path, published_runs_from_json);
}

namespace {

// Every run prepared once: a fit predicts each run many times with other constants.
Result<std::vector<analysis::PreparedJob>> prepare_runs(const std::vector<PublishedRun>& runs,
                                                        const analysis::TimeConstants& k) {
  std::vector<analysis::PreparedJob> out;
  for (const auto& r : runs) {
    MIST_TRY(auto job, analysis::PreparedJob::create(r.job.model, r.job.cluster, r.job.training, k));
    // A fit scores iteration times: the caching allocator's replay (memory) is not needed.
    out.push_back(job.with_allocator_replay(false));
  }
  return out;
}

Result<std::vector<RunError>> errors_of(const std::vector<PublishedRun>& runs,
                                        const std::vector<analysis::PreparedJob>& jobs,
                                        const analysis::TimeConstants& k) {
  std::vector<RunError> out;
  for (size_t i = 0; i < runs.size(); ++i) {
    MIST_TRY(auto pred, analysis::predict(jobs[i].with_constants(k), runs[i].job.plan));
    out.push_back({runs[i].name, runs[i].iteration_time_s, pred.time.iteration_time_s});
  }
  return out;
}

}  // namespace

Result<std::vector<RunError>> run_errors(const std::vector<PublishedRun>& runs, const analysis::TimeConstants& k) {
  MIST_TRY(auto jobs, prepare_runs(runs, k));
  return errors_of(runs, jobs, k);
}

double mean_abs_error(const std::vector<RunError>& e) {
  double sum = 0;
  for (const auto& x : e) sum += std::fabs(x.error());
  return e.empty() ? 0 : sum / static_cast<double>(e.size());
}

double max_abs_error(const std::vector<RunError>& e) {
  double m = 0;
  for (const auto& x : e) m = std::max(m, std::fabs(x.error()));
  return m;
}

namespace {

// Golden-section search of `cost` over [lo, hi] to `tol`; returns the argmin found.
Result<double> golden(const std::function<Result<double>(double)>& cost, double lo, double hi, double tol) {
  const double g = (std::sqrt(5.0) - 1) / 2;
  double x1 = hi - g * (hi - lo), x2 = lo + g * (hi - lo);
  MIST_TRY(double c1, cost(x1));
  MIST_TRY(double c2, cost(x2));
  while (hi - lo > tol) {
    if (c1 <= c2) {
      hi = x2, x2 = x1, c2 = c1;
      x1 = hi - g * (hi - lo);
      MIST_TRY(c1, cost(x1));
    } else {
      lo = x1, x1 = x2, c1 = c2;
      x2 = lo + g * (hi - lo);
      MIST_TRY(c2, cost(x2));
    }
  }
  return (lo + hi) / 2;
}

// The highest efficiency a fit may give: the measured maximum achievable matmul rate of the runs'
// GPU (its MAMF), or 1 where none is measured. A stack's fit can only make GEMMs slower than the
// best one measured on the chip; above it, the fit would be paying with GEMM speed for what the
// model gets wrong elsewhere (and carry that to every other GPU the calibration is applied to).
double efficiency_cap(const PublishedRun& r) {
  const auto& g = r.job.cluster.gpu;
  const auto d = r.job.training.precision;
  const double peak = hardware::sustained_matmul_flops(g, d);
  if (peak <= 0) return 1.0;
  return std::clamp(hardware::achievable_matmul_flops(g, d, hardware::PerfConstants{}) / peak, 0.2, 1.0);
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

Result<RunsFit> fit_matmul_efficiency(const std::vector<PublishedRun>& runs, const analysis::TimeConstants& base) {
  if (runs.empty()) return fail("runs", "no runs to fit");
  for (const auto& r : runs) {
    if (r.job.cluster.gpu.name != runs[0].job.cluster.gpu.name)
      return fail("runs", fmt::format("'{}' runs on {}, '{}' on {}: fit one GPU at a time", runs[0].name,
                                      runs[0].job.cluster.gpu.name, r.name, r.job.cluster.gpu.name));
    if (r.job.training.precision != runs[0].job.training.precision)
      return fail("runs", fmt::format("'{}' and '{}' train in different precisions: fit one at a time", runs[0].name,
                                      r.name));
  }
  RunsFit fit;
  MIST_TRY(auto jobs, prepare_runs(runs, base));
  MIST_TRY(fit.before, errors_of(runs, jobs, base));
  auto cost = [&](double e) -> Result<double> {
    analysis::TimeConstants k = base;
    k.perf.matmul_efficiency = e;
    MIST_TRY(auto errs, errors_of(runs, jobs, k));
    return mean_abs_error(errs);
  };
  // Scan, then golden-section search around the best point of the scan, up to the GPU's MAMF.
  const double cap = efficiency_cap(runs[0]);
  double best = 0.2, best_cost = 1e300;
  std::vector<double> scan;
  for (double e = 0.2; e < cap; e += 0.1) scan.push_back(e);
  scan.push_back(cap);
  for (const double e : scan) {
    MIST_TRY(double c, cost(e));
    if (c < best_cost) best = e, best_cost = c;
  }
  MIST_TRY(double e, golden(cost, std::max(0.2, best - 0.1), std::min(cap, best + 0.1), 1e-4));
  fit.matmul_efficiency = std::min(cap, std::round(e * 1e4) / 1e4);
  analysis::TimeConstants k = base;
  k.perf.matmul_efficiency = fit.matmul_efficiency;
  MIST_TRY(fit.after, errors_of(runs, jobs, k));
  return fit;
}

Result<RunsFit> fit_efficiency_and_host(const std::vector<PublishedRun>& runs, const analysis::TimeConstants& base) {
  MIST_TRY(RunsFit fit, fit_matmul_efficiency(runs, base));  // checks the runs; the host-free fit
  MIST_TRY(auto jobs, prepare_runs(runs, base));
  auto constants = [&](double e, double h) {
    analysis::TimeConstants k = base;
    k.perf.matmul_efficiency = e;
    k.perf.host_per_kernel_s = h;
    return k;
  };
  auto cost = [&](double e, double h) -> Result<double> {
    MIST_TRY(auto errs, errors_of(runs, jobs, constants(e, h)));
    return mean_abs_error(errs);
  };
  constexpr double kMaxHost = 200e-6;
  double best_e = fit.matmul_efficiency, best_h = 0;
  MIST_TRY(double best_cost, cost(best_e, best_h));
  const double cap = efficiency_cap(runs[0]);
  for (double e = 0.3; e <= cap + 1e-9; e += 0.1)
    for (double h : {5e-6, 10e-6, 20e-6, 40e-6, 80e-6}) {
      MIST_TRY(double c, cost(e, h));
      if (c < best_cost) best_e = e, best_h = h, best_cost = c;
    }
  for (int round = 0; round < 3; ++round) {
    MIST_TRY(best_h, golden([&](double h) { return cost(best_e, h); }, std::max(0.0, best_h / 2 - 2e-6),
                            std::min(kMaxHost, best_h * 2 + 2e-6), 1e-8));
    MIST_TRY(best_e, golden([&](double e) { return cost(e, best_h); }, std::max(0.2, best_e - 0.1),
                            std::min(cap, best_e + 0.1), 1e-4));
  }
  fit.matmul_efficiency = std::min(cap, std::round(best_e * 1e4) / 1e4);
  fit.host_per_kernel_s = std::round(best_h * 1e8) / 1e8;
  fit.fitted_host = true;
  MIST_TRY(fit.after, errors_of(runs, jobs, constants(fit.matmul_efficiency, fit.host_per_kernel_s)));
  return fit;
}

std::pair<std::vector<PublishedRun>, std::vector<PublishedRun>> split_runs(const std::vector<PublishedRun>& runs,
                                                                           uint64_t seed) {
  std::pair<std::vector<PublishedRun>, std::vector<PublishedRun>> out;
  for (size_t i = 0; i < runs.size(); ++i)
    (splitmix64(seed * 0x100000001b3ULL + i) & 1 ? out.second : out.first).push_back(runs[i]);
  return out;
}

}  // namespace mist::calibration
