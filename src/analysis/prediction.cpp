#include "analysis/prediction.hpp"

namespace mist::analysis {

Result<Prediction> predict(const PreparedJob& job, const plan::Plan& p) {
  MIST_CHECK(plan::validate_plan(p, job.model(), job.cluster(), job.training()));
  Prediction out;
  MIST_TRY(out.memory, stage_memory(job, p));
  MIST_TRY(out.time, iteration_time(job, p));
  out.matmul_rate = matmul_rate(job);
  out.calibration = job.calibration();
  return out;
}

}  // namespace mist::analysis
