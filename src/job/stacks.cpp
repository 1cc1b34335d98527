#include "job/stacks.hpp"

#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "spec/catalog.hpp"

namespace mist::job {

namespace embedded {
extern const std::string_view kStackFitsJson;
}  // namespace embedded

namespace {

std::optional<spec::Dtype> dtype_named(const std::string& name) {
  for (auto d : {spec::Dtype::kFp32, spec::Dtype::kFp16, spec::Dtype::kBf16})
    if (name == spec::to_string(d)) return d;
  return std::nullopt;
}

Result<StackFit> fit_from_json(const Json& j, size_t index) {
  const std::string what = fmt::format("stack fit {}", index);
  if (!j.is_object() || !j.contains("engine") || !j.contains("gpu") || !j.contains("dtype") || !j.contains("fit"))
    return fail(what, "needs engine, gpu, dtype and fit");
  StackFit f;
  MIST_TRY(f.engine, spec::engine_from_string(j.at("engine").get<std::string>()));
  const std::string dtype = j.at("dtype").get<std::string>();
  const auto d = dtype_named(dtype);
  if (!d) return fail(what + ".dtype", "unknown dtype '" + dtype + "'");
  f.dtype = *d;
  f.stack = j.value("stack", "");
  f.gpu = j.at("gpu").get<std::string>();
  const Json& fit = j.at("fit");
  f.source = fit.value("source", "");
  f.runs_file = fit.value("runs", "");
  f.runs = fit.value("rows", 0);
  f.mean_error = fit.value("mean_rel_error", 0.0);
  if (fit.contains("held_out")) {
    const Json& h = fit.at("held_out");
    f.held_out_runs = h.value("count", 0);
    f.held_out_mean_error = h.value("mean_rel_error", 0.0);
    f.held_out_max_error = h.value("max_rel_error", 0.0);
    f.held_out_file = h.value("runs", "");
  }
  f.constants = j;
  if (j.contains("stack_settings")) {
    const Json& s = j.at("stack_settings");
    if (!s.is_object()) return fail(what + ".stack_settings", "must be an object");
    if (s.contains("grad_dtype")) {
      const std::string g = s.at("grad_dtype").get<std::string>();
      f.grad_dtype = dtype_named(g);
      if (!f.grad_dtype) return fail(what + ".stack_settings.grad_dtype", "unknown dtype '" + g + "'");
    }
    f.overlap_tp_comm = s.value("overlap_tp_comm", false);
    f.settings_why = s.value("why", "");
  }
  return f;
}

Result<std::vector<StackFit>> parse_fits() {
  const Json all = Json::parse(embedded::kStackFitsJson, nullptr, /*allow_exceptions=*/false);
  if (!all.is_array()) return fail("stack fits", "the embedded data/published/*.time_constants.json do not parse");
  std::vector<StackFit> out;
  for (size_t i = 0; i < all.size(); ++i) {
    MIST_TRY(auto f, fit_from_json(all[i], i));
    out.push_back(std::move(f));
  }
  return out;
}

// fp16 and bf16 run on the same tensor cores at the same rate; fp32 on other pipes.
bool same_pipes(spec::Dtype a, spec::Dtype b) { return (a == spec::Dtype::kFp32) == (b == spec::Dtype::kFp32); }

std::string sm(double cc) { return fmt::format("sm_{:.0f}", std::round(cc * 10)); }

}  // namespace

const Result<std::vector<StackFit>>& stack_fits() {
  static const Result<std::vector<StackFit>> fits = parse_fits();
  return fits;
}

StackChoice choose_stack_fit(const std::vector<StackFit>& fits, spec::Engine engine, const spec::GpuSpec& gpu,
                             spec::Dtype precision) {
  StackChoice out;
  if (precision == spec::Dtype::kFp32) {
    out.note = "no fit applies to fp32 training (the fits are of tensor-core GEMMs in 16 bits)";
    return out;
  }
  // Among the fits of this stack: the same GPU first, then the same architecture (compute
  // capability major), then the nearest, the newer on a tie.
  double best = INFINITY;
  for (const auto& f : fits) {
    if (f.engine != engine || !same_pipes(f.dtype, precision)) continue;
    if (f.gpu == gpu.name) {
      out.fit = &f;
      out.same_gpu = true;
      out.note = fmt::format("fitted on this GPU ({})", f.gpu);
      return out;
    }
    auto fitted_on = spec::catalog_gpu(f.gpu);
    if (!fitted_on || fitted_on->vendor != gpu.vendor || gpu.compute_capability <= 0) continue;
    const double major = std::fabs(std::floor(fitted_on->compute_capability) - std::floor(gpu.compute_capability));
    const double score = 10 * major + std::fabs(fitted_on->compute_capability - gpu.compute_capability) -
                         (fitted_on->compute_capability > gpu.compute_capability ? 1e-3 : 0);
    if (score < best) {
      best = score;
      out.fit = &f;
      out.note = fmt::format("fitted on {} ({}), applied to {} ({}): {}", f.gpu, sm(fitted_on->compute_capability),
                             gpu.name, sm(gpu.compute_capability),
                             major == 0 ? "the same generation" : "the nearest generation with a fit");
    }
  }
  if (!out.fit)
    out.note = fmt::format("no published runs of {} fit a {} GPU", spec::display_name(engine),
                           gpu.vendor.empty() ? "this" : gpu.vendor);
  return out;
}

}  // namespace mist::job
