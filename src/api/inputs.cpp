#include "api/inputs.hpp"

#include "export/capability.hpp"

namespace mist::api {

void name_the_option(Error& e, const Input& in) {
  if (!in.option.empty() && !in.json && e.path == in.name_or_path) e = Error{in.option, in.name_or_path + ": " + e.message};
}

namespace {

template <class T>
Result<T> under_option(Result<T> r, const Input& in) {
  if (!r) name_the_option(r.error(), in);
  return r;
}

}  // namespace

Result<spec::ModelSpec> load_model(const Input& in) {
  return in.json ? spec::model_from_json(*in.json, "model") : under_option(spec::load_model(in.name_or_path), in);
}

Result<spec::ClusterFile> load_cluster(const Input& in) {
  return in.json ? spec::cluster_file_from_json(*in.json, "cluster")
                 : under_option(spec::load_cluster(in.name_or_path), in);
}

Result<spec::TrainingSpec> load_training(const Input& in) {
  return in.json ? spec::training_from_json(*in.json, "training")
                 : under_option(spec::load_training(in.name_or_path), in);
}

Result<plan::Plan> load_plan(const Input& in) {
  return in.json ? plan::plan_from_json(*in.json, "plan") : under_option(plan::load_plan(in.name_or_path), in);
}

Result<job::Job> load_job(const JobInputs& in) {
  job::Job job;
  MIST_TRY(job.model, load_model(in.model));
  MIST_TRY(auto cluster, load_cluster(in.cluster));
  job.cluster = std::move(cluster.cluster);
  job.files = std::move(cluster.files);
  MIST_TRY(job.training, load_training(in.training));
  if (in.plan) {
    MIST_TRY(job.plan, load_plan(*in.plan));
  }
  return job;
}

Result<job::PrepareOptions> prepare_options(const Calibration& c) {
  job::PrepareOptions o;
  o.memory_headroom = c.headroom;
  auto e = spec::engine_from_string(c.engine);
  if (!e) return fail("--engine", e.error().message);
  o.engine = *e;
  o.uncalibrated = c.uncalibrated;
  return o;
}

Result<analysis::Prediction> predict(const job::Job& job, const Calibration& c) {
  MIST_TRY(auto options, prepare_options(c));
  job::Job as_run = job;  // the switches the plan file left out, as the engine runs them
  auto switches = engines::take_engine_switches(as_run.plan, options.engine, &as_run.training, &as_run.model);
  MIST_TRY(auto prediction, job::predict(as_run, options));
  prediction.engine_switches = std::move(switches);
  return prediction;
}

}  // namespace mist::api
