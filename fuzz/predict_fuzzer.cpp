// The predictor end to end: {"model": name or object, "cluster": {...}, "training": {...},
// "plan": {...}} -> memory and time. Either an error, or every reported number is finite.
#include "analysis/memory_model.hpp"
#include "analysis/prepared_job.hpp"
#include "analysis/time_model.hpp"
#include "fuzz_util.hpp"

namespace {

using namespace mist;

Result<spec::ModelSpec> model_of(const Json& j) {
  if (j.is_string()) return spec::catalog_model(j.get<std::string>());
  return spec::model_from_json(j, "model");
}

void check_prediction(const analysis::MemoryPrediction& mem, const analysis::TimePrediction& time) {
  for (const auto& s : mem.stages) {
    fuzz::check_finite(s.peak_bytes, "stage peak bytes");
    fuzz::check_finite(s.peak_allocated_bytes, "stage allocated bytes");
    fuzz::check_finite(s.host_bytes, "stage host bytes");
    fuzz::check(s.peak_bytes >= 0, "stage peak bytes not negative", std::to_string(s.peak_bytes));
    for (const auto& t : s.terms) fuzz::check_finite(t.bytes, t.name.c_str());
  }
  fuzz::check_finite(mem.host_bytes_per_node, "host bytes per node");
  fuzz::check_finite(time.iteration_time_s, "iteration time");
  fuzz::check(time.iteration_time_s > 0, "iteration time positive", std::to_string(time.iteration_time_s));
  fuzz::check_finite(time.tokens_per_s, "tokens per second");
  fuzz::check_finite(time.mfu, "mfu");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto j = parse_json_text(fuzz::as_text(data, size), "job");
  if (!j || !j->is_object()) return 0;
  for (const char* key : {"model", "cluster", "training", "plan"})
    if (!j->contains(key)) return 0;
  auto m = model_of((*j)["model"]);
  auto c = spec::cluster_from_json((*j)["cluster"], "cluster");
  auto t = spec::training_from_json((*j)["training"], "training");
  auto p = plan::plan_from_json((*j)["plan"], "plan");
  if (!m || !c || !t || !p) return 0;
  auto job = analysis::PreparedJob::create(*m, *c, *t);
  fuzz::check_error(job, "PreparedJob::create");
  if (!job) return 0;
  // analysis::predict's two parts apart, after its check, so that a memory refusal does not hide the
  // time model: stage_memory also refuses a stage needing more memory than any machine has.
  auto ok = plan::validate_plan(*p, *m, *c, *t);
  fuzz::check_error(ok, "validate_plan");
  if (!ok) return 0;
  auto mem = analysis::stage_memory(*job, *p);
  fuzz::check_error(mem, "stage_memory");
  auto time = analysis::iteration_time(*job, *p);
  fuzz::check_error(time, "iteration_time");
  if (mem && time) check_prediction(*mem, *time);
  return 0;
}
