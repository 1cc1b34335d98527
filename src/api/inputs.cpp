#include "api/inputs.hpp"

namespace mist::api {

Result<spec::ModelSpec> load_model(const Input& in) {
  return in.json ? spec::model_from_json(*in.json, "model") : spec::load_model(in.name_or_path);
}

Result<spec::ClusterFile> load_cluster(const Input& in) {
  return in.json ? spec::cluster_file_from_json(*in.json, "cluster") : spec::load_cluster(in.name_or_path);
}

Result<spec::TrainingSpec> load_training(const Input& in) {
  return in.json ? spec::training_from_json(*in.json, "training") : spec::load_training(in.name_or_path);
}

Result<plan::Plan> load_plan(const Input& in) {
  return in.json ? plan::plan_from_json(*in.json, "plan") : plan::load_plan(in.name_or_path);
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
  return job::predict(job, options);
}

}  // namespace mist::api
