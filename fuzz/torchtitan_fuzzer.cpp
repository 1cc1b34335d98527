// torchtitan override importer: any text either imports as a plan that validates against the job
// (with the training settings the overrides state) or is an error.
#include "export/torchtitan.hpp"
#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mist;
  const auto& job = fuzz::fixed_job();
  auto r = engines::import_torchtitan_overrides(fuzz::as_text(data, size), job.model, job.cluster);
  fuzz::check_error(r, "import_torchtitan_overrides");
  if (!r) return 0;
  const auto t = r->training.applied_to(job.training);
  auto valid = plan::validate_plan(r->plan, job.model, job.cluster, t);
  fuzz::check_error(valid, "validate_plan of an imported plan");
  return 0;
}
