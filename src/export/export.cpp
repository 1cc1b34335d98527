#include <fmt/format.h>

#include "export/deepspeed.hpp"
#include "export/exchange.hpp"
#include "export/megatron.hpp"
#include "export/torchtitan.hpp"

namespace mist::engines {

namespace {

// mist plans mixtures of experts and Qwen3's attention as Megatron-Core runs them
// (analysis::PreparedJob refuses the other stacks); another engine's options would describe a
// different model. Empty when engine `e` takes the model.
std::string model_refusal(Engine e, const spec::ModelSpec& m) {
  std::string why = spec::megatron_core_only(m);
  if (why.empty() || e == Engine::kMegatron) return {};
  return fmt::format("model {} {}: mist exports its plans to Megatron-LM only", m.name, why);
}

}  // namespace

bool runs(Engine e, const job::Job& job) {
  return model_refusal(e, job.model).empty() && inexpressible_reasons(job.plan, e, &job.training, &job.model).empty();
}

std::vector<Engine> runnable_on(const job::Job& job) {
  std::vector<Engine> out;
  for (Engine e : all_engines())
    if (runs(e, job)) out.push_back(e);
  return out;
}

Result<ExportResult> export_plan(Engine e, const job::Job& job, const ExportOptions& o) {
  const auto& [m, c, t, p, files] = job;
  (void)files;  // engines take no calibration
  MIST_CHECK(plan::validate_plan(p, m, c, t));
  if (std::string why = model_refusal(e, m); !why.empty()) return fail("--to", why);
  ExportResult r;
  r.reasons = inexpressible_reasons(p, e, &t, &m);
  if (!r.reasons.empty()) {
    Nearest n = nearest_expressible(p, e, &t, &m);
    if (n.plan != p) r.nearest = std::move(n);
    return r;
  }
  Exported x;
  x.engine = e;
  switch (e) {
    case Engine::kMegatron:
      x.options = megatron_options(m, c, t, p);
      x.environment = megatron_environment(c, p);
      x.notes = megatron_notes(m, c, t, p);
      break;
    case Engine::kDeepSpeed:
      x.config = deepspeed_config(t, p);
      x.options = megatron_deepspeed_options(m, t, p, o.deepspeed_config_path);
      x.environment = megatron_deepspeed_environment(p);
      x.notes = deepspeed_notes(m, t, p);
      break;
    case Engine::kTorchtitan:
      x.options = torchtitan_options(m, t, p);
      x.notes = torchtitan_notes(m, t, p);
      break;
  }
  r.exported = std::move(x);
  return r;
}

}  // namespace mist::engines
