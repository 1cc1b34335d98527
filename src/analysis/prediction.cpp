#include "analysis/prediction.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace mist::analysis {

Band time_band(const Calibration& c, const std::string& gpu, double t) {
  Band b;
  if (c.held_out_runs > 0) {
    b.relative = c.held_out_mean_error;
    b.basis = fmt::format("the calibration's mean error on {} runs it was not fitted on", c.held_out_runs);
  } else if (c.runs > 0) {
    b.relative = c.mean_error;
    b.basis = fmt::format("the calibration's mean error on the {} runs it was fitted on (none held out)", c.runs);
  } else {
    b.relative = kUncalibratedTimeBand;
    b.basis = c.kind == "file" ? "a constants file without recorded fit errors: the physics alone's band"
                               : "the physics alone: its error on published runs without a calibration";
  }
  if (c.kind == "stack" && !c.fitted_gpu.empty() && c.fitted_gpu != gpu)
    b.basis += ", measured on " + c.fitted_gpu;
  b.low = t * (1 - b.relative);
  b.high = t * (1 + b.relative);
  return b;
}

bool stack_overlaps_tp_comm(const PreparedJob& job, const plan::Plan& p) {
  return job.calibration().overlap_tp_comm && p.tp > 1 && p.sequence_parallel;
}

plan::Plan with_stack_settings(const PreparedJob& job, plan::Plan p) {
  if (!p.overlap_tp_comm_stated.value && stack_overlaps_tp_comm(job, p)) p.overlap_tp_comm = true;
  return p;
}

Result<Prediction> predict(const PreparedJob& job, const plan::Plan& given) {
  MIST_CHECK(plan::validate_plan(given, job.model(), job.cluster(), job.training()));
  Prediction out;
  out.plan = with_stack_settings(job, given);
  const plan::Plan& p = out.plan;
  MIST_TRY(out.memory, stage_memory(job, p));
  MIST_TRY(out.time, iteration_time(job, p));
  out.matmul_rate = matmul_rate(job);
  out.calibration = job.calibration();
  if (p.overlap_tp_comm && !given.overlap_tp_comm)
    out.calibration.settings.push_back("TP communication overlapped with its GEMMs (plan.overlap_tp_comm)");
  out.time_band = time_band(out.calibration, job.cluster().gpu.name, out.time.iteration_time_s);
  double reserved = 0;
  for (const auto& s : out.memory.stages) reserved = std::max(reserved, s.reserved_bytes);
  out.memory_band = {reserved * (1 - kMemoryBand), reserved * (1 + kMemoryBand), kMemoryBand,
                     kMemoryBandBasis};
  return out;
}

}  // namespace mist::analysis
