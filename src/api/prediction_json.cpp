#include "api/prediction_json.hpp"

#include <algorithm>

#include "profile/op_source.hpp"

namespace mist::api {

namespace {

Json band_json(const analysis::Band& b) {
  return {{"low", b.low}, {"high", b.high}, {"relative", b.relative}, {"basis", b.basis}};
}

}  // namespace

Json calibration_json(const analysis::Calibration& c) {
  Json j = {{"kind", c.kind}, {"engine", c.engine}, {"note", c.note}};
  if (c.kind == "stack") {
    j["stack"] = c.stack;
    j["fitted_gpu"] = c.fitted_gpu;
    j["source"] = c.source;
    j["runs"] = c.runs;
    j["mean_rel_error"] = c.mean_error;
    j["stack_settings"] = c.settings;
    if (!c.settings.empty()) j["stack_settings_why"] = c.settings_why;
    j["held_out"] = c.held_out_runs > 0 ? Json{{"runs", c.held_out_runs},
                                               {"mean_rel_error", c.held_out_mean_error},
                                               {"max_rel_error", c.held_out_max_error}}
                                        : Json(nullptr);
  }
  return j;
}

Json prediction_json(const job::Job& job, const analysis::Prediction& pred) {
  const auto& p = pred.memory;
  Json stages = Json::array();
  for (const auto& s : p.stages) {
    Json mem = Json::object();
    for (const auto& t : s.terms) mem[t.name] = t.bytes;
    stages.push_back({{"index", s.index},
                      {"num_layers", s.num_layers},
                      {"ckpt_layers", s.ckpt_layers},
                      {"in_flight_micro_batches", s.in_flight},
                      // torch.cuda.max_memory_allocated / max_memory_reserved, and everything on the
                      // GPU (the reserved peak, the CUDA context, NCCL's buffers): what fits is judged on.
                      {"peak_memory_bytes", s.peak_allocated_bytes},
                      {"reserved_memory_bytes", s.reserved_bytes},
                      {"device_memory_bytes", s.peak_bytes},
                      {"allocator",
                       {{"expandable_segments", s.expandable_segments},
                        {"replayed_allocated_bytes", s.replayed_allocated_bytes},
                        {"cache_release_retries", s.allocator_retries}}},
                      {"capacity_bytes", s.capacity_bytes},
                      {"fits", s.fits},
                      {"usable_bytes", s.usable_bytes},
                      {"shortfall_bytes", std::max(0.0, s.peak_bytes - s.usable_bytes)},
                      {"memory", mem},
                      {"block_activation_bytes", s.block_activation_bytes},
                      {"block_activation_bytes_recomputed", s.block_activation_bytes_recomputed},
                      {"host_memory_bytes", s.host_bytes}});
    const auto& ts = pred.time.stages[static_cast<size_t>(s.index)];
    Json stable = Json::object(), delta = Json::object();
    for (const auto& t : ts.stable_terms) stable[t.name] = t.seconds;
    for (const auto& t : ts.delta_terms) delta[t.name] = t.seconds;
    stages.back()["stable_time_s"] = ts.stable_s;
    stages.back()["delta_time_s"] = ts.delta_s;
    stages.back()["forward_time_s"] = ts.fwd_s;
    stages.back()["backward_time_s"] = ts.bwd_s;
    stages.back()["time"] = {{"stable", stable}, {"delta", delta}};
  }
  const auto& t = pred.time;
  const auto& rate = pred.matmul_rate;
  return Json{{"model", job.model.name},
              {"num_parameters", job.model.num_parameters()},
              {"num_active_parameters", job.model.num_active_parameters()},
              {"cluster", spec::cluster_to_json(job.cluster, job.files)},
              {"training", spec::training_to_json(job.training)},
              {"plan", plan::plan_to_json(pred.plan)},
              {"fits", p.fits},
              {"host_memory_bytes_per_node", p.host_bytes_per_node},
              {"host_memory_capacity_bytes", p.host_capacity_bytes},
              {"host_fits", p.host_fits},
              {"iteration_time_s", t.iteration_time_s},
              {"pipeline_fill_s", t.pipeline_fill_s},
              {"steady_state_s", t.steady_s},
              {"exposed_delta_s", t.exposed_delta_s},
              {"tokens_per_s", t.tokens_per_s},
              {"model_flops_per_iteration", t.model_flops_per_iteration},
              {"model_tflops_per_gpu", t.model_tflops_per_gpu},
              {"mfu", t.mfu},
              {"op_time_sources", profile::to_json(t.op_sources)},  // docs/profile.md
              {"matmul_tflops", rate.flops / 1e12},
              {"matmul_rate_source", rate.source},
              {"calibration", calibration_json(pred.calibration)},
              {"engine_switches", pred.engine_switches},
              {"bands",
               {{"iteration_time_s", band_json(pred.time_band)}, {"reserved_memory_bytes", band_json(pred.memory_band)}}},
              {"stages", stages}};
}

}  // namespace mist::api
