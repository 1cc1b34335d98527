#include "job/prepare.hpp"

#include "hardware/fit.hpp"

namespace mist::job {

Result<CalibrationData> read_calibration(const spec::CalibrationFiles& files) {
  CalibrationData d;
  if (!files.profile_db.empty()) {
    auto table = profile::OpTable::load(files.profile_db);
    if (!table) return fail("cluster." + table.error().path, table.error().message);
    d.profile = *table;
  }
  if (!files.time_constants.empty()) {
    auto j = read_json_file(files.time_constants);
    if (!j) return fail("cluster.time_constants", j.error().to_string());
    d.time_constants = std::move(*j);
    d.time_constants_path = files.time_constants;
  }
  return d;
}

Result<analysis::PreparedJob> prepare(const spec::ModelSpec& model, const spec::ClusterSpec& cluster,
                                      const spec::TrainingSpec& training, const CalibrationData& calibration) {
  analysis::TimeConstants k;
  analysis::Calibration about;
  k.profile = calibration.profile;
  if (calibration.time_constants) {
    MIST_CHECK(hardware::apply_constants_json(*calibration.time_constants, cluster.gpu.name, "cluster.time_constants",
                                              k.perf));
    about.constants_source = "cluster.time_constants (" + calibration.time_constants_path + ")";
  }
  return analysis::PreparedJob::create(model, cluster, training, std::move(k), std::move(about));
}

Result<analysis::PreparedJob> prepare(const Job& job) {
  MIST_TRY(auto calibration, read_calibration(job.files));
  return prepare(job.model, job.cluster, job.training, calibration);
}

Result<analysis::Prediction> predict(const Job& job) {
  MIST_TRY(auto prepared, prepare(job));
  return analysis::predict(prepared, job.plan);
}

}  // namespace mist::job
