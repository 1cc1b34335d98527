#include "cli/report.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/units.hpp"

namespace mist::cli {

std::string format_bytes(double bytes) {
  const double a = std::fabs(bytes);
  if (a >= units::kGiB) return fmt::format("{:.2f} GiB", bytes / units::kGiB);
  if (a >= units::kMiB) return fmt::format("{:.1f} MiB", bytes / units::kMiB);
  if (a >= units::kKiB) return fmt::format("{:.1f} KiB", bytes / units::kKiB);
  return fmt::format("{:.0f} B", bytes);
}

std::string parameter_summary(const spec::ModelSpec& m) {
  if (!m.is_moe()) return fmt::format("{:.2f}B params", m.num_parameters() / 1e9);
  return fmt::format("{:.2f}B params, {:.2f}B active: {} experts, top {}", m.num_parameters() / 1e9,
                     m.num_active_parameters() / 1e9, m.num_experts, m.experts_per_token);
}

std::string extra_degrees_text(const plan::Plan& p) {
  // The K/V exchange when it is not the ring (plan.cp_comm).
  // a2a+p2p with its groups: the all-to-all's size × the ring's.
  const std::string comm = p.cp_comm == plan::CpComm::kA2aP2p
                               ? fmt::format(" a2a+p2p {}×{}", p.cp_a2a, p.cp / std::max<int64_t>(1, p.cp_a2a))
                           : p.cp_comm != plan::CpComm::kRing ? fmt::format(" {}", plan::to_string(p.cp_comm))
                                                              : std::string();
  return (p.cp > 1 ? fmt::format(" cp {}{}", p.cp, comm) : std::string()) +
         (p.ep > 1 || p.etp > 1 ? fmt::format(" ep {} etp {}", p.ep, p.etp) : std::string());
}

namespace {

double term(const analysis::StageMemory& s, const std::string& name) {
  for (const auto& t : s.terms)
    if (t.name == name) return t.bytes;
  return 0;
}

std::string header(const Job& job) {
  const auto& p = job.plan;
  return fmt::format(
      "model {} ({} layers, h {}, {}) on {} × {} {}{} | dp {} tp {}{} pp {}{}{} | "
      "micro-batch {} × {} accumulation = global batch {} | seq {} {}\n",
      job.model.name, job.model.num_layers, job.model.hidden_size, parameter_summary(job.model),
      job.cluster.nodes, job.cluster.gpus_per_node, job.cluster.gpu.name,
      job.cluster.nvlink_gpus() > job.cluster.gpus_per_node
          ? fmt::format(" (NVLink domains of {} GPUs)", job.cluster.nvlink_gpus())
          : std::string(),
      p.dp, p.tp,
      p.sequence_parallel ? "+sp" : "", p.pp,
      p.virtual_pipeline_stages > 1
          ? fmt::format(" (v {}{})", p.virtual_pipeline_stages, plan::uneven_chunks(p) ? ", chunks of unequal size" : "")
          : "",
      extra_degrees_text(p),
      p.micro_batch_size, p.grad_accum_steps, job.training.global_batch_size, job.training.seq_length,
      spec::precision_name(job.training) +
          (p.recompute == plan::Recompute::kSelective && job.training.recompute_modules != spec::kRecomputeCoreAttn
               ? " | selective recompute of " + join(spec::recompute_module_names(job.training.recompute_modules))
               : std::string()));
}

std::string band_text(const Prediction& pred) {
  const auto& t = pred.time_band;
  const auto& m = pred.memory_band;
  return fmt::format("expect the iteration in {} - {} (±{:.1f}%: {}); the reserved peak in {} - {} (±{:.0f}%: {})\n",
                     format_seconds(t.low), format_seconds(t.high), 100 * t.relative, t.basis, format_bytes(m.low),
                     format_bytes(m.high), 100 * m.relative, m.basis);
}

}  // namespace

std::string format_seconds(double s) {
  if (s >= 1) return fmt::format("{:.3f} s", s);
  if (s >= 1e-3) return fmt::format("{:.2f} ms", s * 1e3);
  return fmt::format("{:.0f} µs", s * 1e6);
}

std::string calibration_text(const analysis::Calibration& c) {
  if (c.kind == "file") return "calibration: the cluster's time_constants file\n";
  if (c.kind == "stack") {
    std::string held = c.held_out_runs > 0 ? fmt::format("; on {} held-out runs {:.1f}% mean, {:.1f}% worst error",
                                                         c.held_out_runs, 100 * c.held_out_mean_error,
                                                         100 * c.held_out_max_error)
                                           : "; no held-out runs";
    std::string settings;
    if (!c.settings.empty()) {
      settings = "the stack's settings, which the job's files left out:";
      for (const auto& s : c.settings) settings += "\n  " + s;
      settings += "\n  " + c.settings_why + "\n";
    }
    return fmt::format("calibration: {} on {} ({} runs, {:.1f}% mean error{}); --uncalibrated for the physics alone\n{}",
                       c.stack, c.fitted_gpu, c.runs, 100 * c.mean_error, held, settings);
  }
  return "calibration: none (" + c.note + "); uncalibrated, the model was on average 5-28% optimistic against\n"
         "published runs (docs/time-model.md)\n";
}

namespace {

// The switches the plan file left out that --engine set as the engine runs them.
std::string engine_switches_text(const Prediction& pred) {
  if (pred.engine_switches.empty()) return "";
  const auto e = spec::engine_from_string(pred.calibration.engine);
  std::string out = fmt::format("as {} runs it (the plan file left these out; state them to choose otherwise):\n",
                                e ? spec::display_name(*e) : pred.calibration.engine.c_str());
  for (const auto& s : pred.engine_switches) out += "  " + s + "\n";
  return out;
}

}  // namespace

std::string prediction_text(const Job& job, const Prediction& pred) {
  const auto& p = pred.memory;
  std::string out = header(job);
  out += fmt::format("{:>5} {:>6} {:>5} {:>7} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11}  {}\n",
                     "stage", "layers", "ckpt", "flight", "weights", "grads", "optimizer",
                     "activations", "other", "peak", "capacity", "fits");
  for (const auto& s : p.stages) {
    const double states = term(s, "weights") + term(s, "gradients") + term(s, "optimizer_states");
    const double other = s.peak_bytes - states - term(s, "activations");
    out += fmt::format("{:>5} {:>6} {:>5} {:>7.3g} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11}  {}\n",
                       s.index, s.num_layers, s.ckpt_layers, s.in_flight, format_bytes(term(s, "weights")),
                       format_bytes(term(s, "gradients")), format_bytes(term(s, "optimizer_states")),
                       format_bytes(term(s, "activations")), format_bytes(other), format_bytes(s.peak_bytes),
                       format_bytes(s.capacity_bytes),
                       s.fits ? "yes" : "NO, short " + format_bytes(s.peak_bytes - s.usable_bytes));
  }
  if (p.host_bytes_per_node > 0 || !p.host_fits)
    out += fmt::format("host memory per node for offloaded state: {} of {}{}\n",
                       format_bytes(p.host_bytes_per_node), format_bytes(p.host_capacity_bytes),
                       p.host_fits ? "" : "  (does NOT fit)");
  if (!p.stages.empty()) {
    const auto& w = *std::max_element(p.stages.begin(), p.stages.end(),
                                      [](const auto& a, const auto& b) { return a.peak_bytes < b.peak_bytes; });
    out += fmt::format("stage {}'s peak: {} allocated, {} reserved by PyTorch's caching allocator (its rules replayed on "
                       "the iteration, {}){}, {} outside it (CUDA context, NCCL)\n",
                       w.index, format_bytes(w.peak_allocated_bytes), format_bytes(w.reserved_bytes),
                       w.expandable_segments ? "expandable segments" : "classic segments",
                       w.allocator_retries > 0 ? fmt::format(" after releasing its cache {} times", w.allocator_retries)
                                               : "",
                       format_bytes(w.peak_bytes - w.reserved_bytes));
  }
  out += p.fits ? "The plan fits.\n" : "The plan does NOT fit.\n";
  const auto& t = pred.time;
  out += fmt::format("\n{:>5} {:>12} {:>12} {:>12}\n", "stage", "forward", "backward", "first/last");
  for (const auto& s : t.stages)
    out += fmt::format("{:>5} {:>12} {:>12} {:>12}\n", s.index, format_seconds(s.fwd_s), format_seconds(s.bwd_s),
                       format_seconds(s.delta_s));
  out += fmt::format(
      "iteration {} = fill {} + {} steady micro-batches {} + exposed first/last {}\n"
      "{:.0f} tokens/s, {:.1f} model TFLOP/s per GPU, MFU {:.1f}%\n",
      format_seconds(t.iteration_time_s), format_seconds(t.pipeline_fill_s), job.plan.grad_accum_steps - 1,
      format_seconds(t.steady_s), format_seconds(t.exposed_delta_s), t.tokens_per_s, t.model_tflops_per_gpu,
      100 * t.mfu);
  const auto& rate = pred.matmul_rate;
  out += fmt::format("GEMMs at {:.0f} TFLOP/s: {}\n", rate.flops / 1e12, rate.source);
  out += calibration_text(pred.calibration);
  out += engine_switches_text(pred);
  out += band_text(pred);
  return out;
}

std::string explanation_text(const Job& job, const Prediction& pred) {
  const auto& p = pred.memory;
  std::string out = header(job);
  for (const auto& s : p.stages) {
    out += fmt::format("\nstage {}: {} blocks ({} recomputed), {:.3g} micro-batches in flight{}{}\n", s.index,
                       s.num_layers, s.ckpt_layers, s.in_flight, s.index == 0 ? ", embedding" : "",
                       s.index + 1 == static_cast<int>(p.stages.size()) ? ", LM head and loss" : "");
    for (const auto& t : s.terms) {
      out += fmt::format("  {:<22} {:>11}  = {}\n", t.name, format_bytes(t.bytes), t.display);
      out += fmt::format("  {:<22} {:>11}    {}\n", "", "", t.description);
    }
    out += fmt::format("  {:<22} {:>11}  (capacity {}: {})\n", "peak", format_bytes(s.peak_bytes),
                       format_bytes(s.capacity_bytes), s.fits ? "fits" : "does NOT fit");
    out += "  where\n";
    for (const auto& q : s.quantities)
      out += fmt::format("    {:<8} {:>11}  = {}\n    {:<8} {:>11}    {}\n", q.name,
                         q.is_bytes ? format_bytes(q.bytes) : fmt::format("{:.4g}", q.bytes), q.formula, "",
                         "", q.description);
    std::string knobs;
    for (const auto& [k, v] : s.knobs) knobs += fmt::format("{}={:g} ", k, v);
    out += "  with " + knobs + "\n";
    const auto& ts = pred.time.stages[static_cast<size_t>(s.index)];
    out += fmt::format("  time per micro-batch (T_{}) {}:\n", s.index, format_seconds(ts.stable_s));
    for (const auto& t : ts.stable_terms)
      out += fmt::format("    {:<22} {:>11}  {}\n", t.name, format_seconds(t.seconds), t.description);
    out += fmt::format("  extra of the first and last micro-batch (D_{}) {}:\n", s.index, format_seconds(ts.delta_s));
    for (const auto& t : ts.delta_terms)
      out += fmt::format("    {:<22} {:>11}  {}\n", t.name, format_seconds(t.seconds), t.description);
  }
  const auto& t = pred.time;
  out += fmt::format(
      "\niteration = Σ T_i + (G - 1)·max T_i + max_i(D_i - Σ_{{j<i}} T_j)\n"
      "          = {} + {} + {} = {}   (G = {}{})\n",
      format_seconds(t.pipeline_fill_s), format_seconds(t.steady_s), format_seconds(t.exposed_delta_s),
      format_seconds(t.iteration_time_s), job.plan.grad_accum_steps,
      job.plan.virtual_pipeline_stages > 1 ? ", fill shortened by interleaving" : "");
  return out;
}

}  // namespace mist::cli
