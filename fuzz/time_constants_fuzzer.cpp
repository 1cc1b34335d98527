// A cluster's "time_constants" file (`mist fit --out`): applied to the defaults for an A100, it is
// refused naming a field, or every constant stays in its documented range and the fixed job
// (GPT-3 13B on 2x8 A100) still predicts a finite, positive iteration time.
#include "analysis/prediction.hpp"
#include "fuzz_util.hpp"
#include "hardware/fit.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mist;
  auto j = parse_json_text(fuzz::as_text(data, size), "time_constants");
  if (!j) return 0;
  analysis::TimeConstants k;
  auto applied = hardware::apply_constants_json(*j, "A100-SXM4-80GB", "cluster.time_constants", k.perf);
  fuzz::check_error(applied, "apply_constants_json");
  if (!applied) return 0;
  const auto& c = k.perf;
  for (double e : {c.hbm_efficiency, c.flash_fwd_efficiency, c.flash_bwd_efficiency})
    fuzz::check(e > 0 && e <= 50, "efficiency in (0, 50]", std::to_string(e));
  fuzz::check(c.matmul_efficiency >= 0 && c.matmul_efficiency <= 50, "matmul efficiency in [0, 50]",
              std::to_string(c.matmul_efficiency));
  fuzz::check(c.kernel_launch_s >= 0 && c.kernel_launch_s <= 1e-2, "launch in [0, 10 ms]");
  fuzz::check(c.vector_flops >= 0 && std::isfinite(c.vector_flops), "vector FLOP/s finite, not negative");
  fuzz::check(c.host_per_kernel_s >= 0 && c.host_per_kernel_s <= 1e-3, "host cost per kernel in [0, 1 ms]");
  const auto& job = fuzz::fixed_job();
  auto p = plan::uniform_plan(job.model, 2, 4, 2, 2, 128, {});
  auto prepared = analysis::PreparedJob::create(job.model, job.cluster, job.training, k);
  fuzz::check_error(prepared, "PreparedJob::create");
  if (!prepared) return 0;
  auto pred = analysis::predict(*prepared, p);
  fuzz::check_error(pred, "predict");
  if (pred) {
    fuzz::check_finite(pred->time.iteration_time_s, "iteration time");
    fuzz::check(pred->time.iteration_time_s > 0, "iteration time positive");
  }
  return 0;
}
