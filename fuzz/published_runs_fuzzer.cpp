// Published runs (data/published/*.json, `mist fit --runs`): parse; every run that loads is a valid
// job, so the time model must answer it with a finite, positive iteration time.
#include "calibration/published_runs.hpp"
#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mist;
  auto j = parse_json_text(fuzz::as_text(data, size), "runs");
  if (!j) return 0;
  auto runs = calibration::published_runs_from_json(*j, "runs");
  fuzz::check_error(runs, "published_runs_from_json");
  if (!runs) return 0;
  fuzz::check(!runs->runs.empty(), "a loaded runs file has runs");
  // A few runs per input: one prediction of a large job costs about 0.4 s under ASan.
  for (size_t i = 0; i < runs->runs.size() && i < 2; ++i) {
    const auto& r = runs->runs[i];
    fuzz::check(r.iteration_time_s > 0, "measured time positive");
    auto e = calibration::run_errors({r});
    fuzz::check_error(e, "run_errors");
    if (!e) continue;
    fuzz::check_finite(e->front().predicted_s, "predicted iteration time");
    fuzz::check(e->front().predicted_s > 0, "predicted iteration time positive");
  }
  return 0;
}
