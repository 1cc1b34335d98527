#include <fmt/format.h>

#include "export/deepspeed.hpp"
#include "export/exchange.hpp"
#include "export/megatron.hpp"
#include "export/torchtitan.hpp"

namespace mist::engines {

Result<ExportResult> export_plan(Engine e, const job::Job& job, const ExportOptions& o) {
  const auto& [m, c, t, p, files] = job;
  (void)files;  // engines take no calibration
  MIST_CHECK(plan::validate_plan(p, m, c, t));
  // mist plans mixtures of experts and Qwen3's attention as Megatron-Core runs them
  // (analysis::PreparedJob refuses the other stacks); another engine's options would describe a
  // different model.
  if (std::string why = spec::megatron_core_only(m); !why.empty() && e != Engine::kMegatron)
    return fail("--to", fmt::format("model {} {}: mist exports its plans to Megatron-LM only", m.name, why));
  ExportResult r;
  r.reasons = inexpressible_reasons(p, e, &t);
  if (!r.reasons.empty()) {
    Nearest n = nearest_expressible(p, e, &t);
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
