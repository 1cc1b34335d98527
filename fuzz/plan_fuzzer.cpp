// Plan input: parse, round-trip, then validate against a fixed job (GPT-3 13B on 2x8 A100).
#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mist;
  auto j = parse_json_text(fuzz::as_text(data, size), "plan");
  if (!j) return 0;
  auto p = plan::plan_from_json(*j, "plan");
  fuzz::check_error(p, "plan_from_json");
  if (!p) return 0;
  auto back = plan::plan_from_json(plan::plan_to_json(*p), "plan");
  fuzz::check(back.has_value(), "plan round trip loads", back ? "" : back.error().to_string());
  fuzz::check(*back == *p, "plan round trip is exact");
  const auto& job = fuzz::fixed_job();
  auto valid = plan::validate_plan(*p, job.model, job.cluster, job.training);
  fuzz::check_error(valid, "validate_plan");
  if (valid) {
    fuzz::check(p->dp * p->tp * p->pp == job.cluster.num_gpus(), "a valid plan uses every GPU");
    fuzz::check(static_cast<int64_t>(p->stages.size()) == p->pp, "a valid plan has pp stages");
  }
  return 0;
}
