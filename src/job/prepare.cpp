#include "job/prepare.hpp"

#include <fmt/format.h>

#include "hardware/fit.hpp"
#include "job/stacks.hpp"
#include "spec/catalog.hpp"

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

namespace {

// The shipped fit of the job's stack, applied to `k`, described in `about`; the stack's settings
// the training's file left out, applied to `training`.
Result<void> apply_stack_fit(const spec::ClusterSpec& cluster, spec::TrainingSpec& training,
                             spec::Engine engine, hardware::PerfConstants& k, analysis::Calibration& about) {
  const auto& fits = stack_fits();
  if (!fits) return std::unexpected(fits.error());
  const StackChoice choice = choose_stack_fit(*fits, engine, cluster.gpu, training.precision);
  about.note = choice.note;
  if (!choice.fit) return {};
  const StackFit& f = *choice.fit;
  // The constants are fractions of the fitted GPU's peak figures, applied as such to this one; but
  // the stack reaches a share of what the hardware can reach, so on another GPU the matmul
  // efficiency moves with the two GPUs' measured MAMF fractions of their peaks (docs/time-model.md).
  MIST_CHECK(hardware::apply_constants_json(f.constants, f.gpu, "calibration", k));
  std::string transfer;
  if (auto from = spec::catalog_gpu(f.gpu); !choice.same_gpu && from && k.matmul_efficiency > 0) {
    const auto& to = cluster.gpu;
    if (from->matmul_bf16_flops > 0 && from->bf16_flops > 0 && to.matmul_bf16_flops > 0 && to.bf16_flops > 0) {
      const double ratio = (to.matmul_bf16_flops / to.bf16_flops) / (from->matmul_bf16_flops / from->bf16_flops);
      k.matmul_efficiency *= ratio;
      if (ratio != 1)
        transfer = fmt::format("; its matmul efficiency scaled by the GPUs' MAMF fractions ({:.3f} / {:.3f})",
                             to.matmul_bf16_flops / to.bf16_flops, from->matmul_bf16_flops / from->bf16_flops);
    }
  }
  about.note += transfer;
  about.kind = "stack";
  about.stack = f.stack;
  about.fitted_gpu = f.gpu;
  about.source = f.source;
  about.runs = f.runs;
  about.mean_error = f.mean_error;
  about.held_out_runs = f.held_out_runs;
  about.held_out_mean_error = f.held_out_mean_error;
  about.held_out_max_error = f.held_out_max_error;
  about.constants_source = fmt::format("the {} calibration, {}", spec::display_name(engine), choice.note);
  // Mixed precision keeps gradients in fp32 or in the training dtype (training_from_json).
  if (f.grad_dtype && !training.grad_dtype_stated.value && training.grad_dtype != *f.grad_dtype &&
      (*f.grad_dtype == spec::Dtype::kFp32 || *f.grad_dtype == training.precision)) {
    training.grad_dtype = *f.grad_dtype;
    about.settings.push_back(fmt::format("gradients reduced in {} (training.grad_dtype)", spec::to_string(*f.grad_dtype)));
  }
  about.overlap_tp_comm = f.overlap_tp_comm;
  about.settings_why = f.settings_why;
  return {};
}

}  // namespace

Result<analysis::PreparedJob> prepare(const spec::ModelSpec& model, const spec::ClusterSpec& cluster,
                                      const spec::TrainingSpec& training, const CalibrationData& calibration,
                                      const PrepareOptions& options) {
  analysis::TimeConstants k;
  analysis::Calibration about;
  spec::TrainingSpec trained = training;  // with the stack's settings its file left out
  about.engine = spec::to_string(options.engine);
  k.profile = calibration.profile;
  if (calibration.time_constants) {
    if (options.uncalibrated)
      return fail("--uncalibrated", "the cluster names a time_constants file; give one or the other");
    MIST_CHECK(hardware::apply_constants_json(*calibration.time_constants, cluster.gpu.name, "cluster.time_constants",
                                              k.perf));
    about.kind = "file";
    about.constants_source = "cluster.time_constants (" + calibration.time_constants_path + ")";
    about.note = "the cluster's own constants file";
  } else if (options.uncalibrated) {
    about.note = "--uncalibrated: the physics alone";
  } else {
    MIST_CHECK(apply_stack_fit(cluster, trained, options.engine, k.perf, about));
  }
  if (!(options.memory_headroom >= 0 && options.memory_headroom < 0.9))
    return fail("--headroom",
                fmt::format("must be a fraction of GPU memory in [0, 0.9), got {:g}", options.memory_headroom));
  MIST_TRY(auto job, analysis::PreparedJob::create(model, cluster, trained, std::move(k), std::move(about),
                                                   options.engine));
  return job.with_memory_headroom(options.memory_headroom);
}

Result<analysis::PreparedJob> prepare(const Job& job, const PrepareOptions& options) {
  MIST_TRY(auto calibration, read_calibration(job.files));
  return prepare(job.model, job.cluster, job.training, calibration, options);
}

Result<analysis::Prediction> predict(const Job& job, const PrepareOptions& options) {
  MIST_TRY(auto prepared, prepare(job, options));
  return analysis::predict(prepared, job.plan);
}

}  // namespace mist::job
