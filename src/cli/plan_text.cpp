#include "cli/plan_text.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/report.hpp"

namespace mist::cli {

std::string plan_compact(const plan::Plan& p) {
  std::string zero, ckpt, offload;
  for (const auto& s : p.stages) {
    zero += std::to_string(s.zero);
    ckpt += (ckpt.empty() ? "" : ",") + std::to_string(s.ckpt_layers) + "/" + std::to_string(s.num_layers);
    const auto& o = s.offload;
    if (o.weights + o.gradients + o.optimizer_states + o.activations > 0)
      offload += fmt::format(" s{}:w{:g}/g{:g}/o{:g}/a{:g}", &s - p.stages.data(), o.weights, o.gradients,
                             o.optimizer_states, o.activations);
  }
  const std::string v = p.virtual_pipeline_stages > 1 ? fmt::format(" v {}", p.virtual_pipeline_stages) : "";
  return fmt::format("dp {} tp {} pp {}{}{}{} mb {} G {}{} zero {} ckpt {}{}", p.dp, p.tp, p.pp, v,
                     extra_degrees_text(p), p.overlap_moe_a2a ? " ovl" : "", p.micro_batch_size,
                     p.grad_accum_steps, p.recompute == plan::Recompute::kSelective ? " sel" : "", zero, ckpt,
                     offload.empty() ? "" : " offload" + offload);
}

std::string plan_legend() {
  return "legend: dp, tp, pp data-, tensor- and pipeline-parallel degrees (v interleaved model chunks per stage, "
         "cp context-parallel,\n"
         "  with a2a, all_gather or a2a+p2p a×r (all-to-alls over a, the ring over r) its K/V exchange when not the "
         "ring,\n  ep/etp expert-parallel degrees, ovl their all-to-alls overlapped with another micro-batch's "
         "compute); mb micro-batch size;\n  G micro-batches per iteration; sel selective recompute;\n"
         "  zero the ZeRO level of each stage; ckpt fully recomputed/layers of each stage; offload sN:w/g/o/a the "
         "fractions of\n"
         "  weights/gradients/optimizer states/activations stage N keeps in host memory; gap: slower than #1; "
         "runs on: the\n"
         "  engines whose export runs the plan (- for none: only mist's space has it)\n";
}

namespace {

std::string percent(double f) { return fmt::format("{:g}%", 100 * f); }

std::string stage_in_words(const plan::Plan& p, size_t i, int64_t first) {
  const auto& s = p.stages[i];
  std::string out = p.virtual_pipeline_stages > 1
                        ? fmt::format("  stage {}: {} layers in {} chunks", i, s.num_layers, p.virtual_pipeline_stages)
                        : fmt::format("  stage {}: layers {}-{}", i, first, first + s.num_layers - 1);
  if (!s.chunk_layers.empty()) out += fmt::format(" of {}", fmt::join(s.chunk_layers, "+"));
  out += s.zero > 0 ? fmt::format(", ZeRO-{}", s.zero) : ", no ZeRO";
  out += s.ckpt_layers == 0 ? ", no layer fully recomputed"
                            : fmt::format(", {} of {} layers fully recomputed", s.ckpt_layers, s.num_layers);
  const auto& o = s.offload;
  std::string off;
  auto add = [&](const char* what, double f) {
    if (f > 0) off += fmt::format("{}{} {}", off.empty() ? "" : ", ", what, percent(f));
  };
  add("weights", o.weights);
  add("gradients", o.gradients);
  add("optimizer states", o.optimizer_states);
  add("activations", o.activations);
  out += off.empty() ? ", nothing offloaded" : ", offloaded to host memory: " + off;
  return out + "\n";
}

}  // namespace

std::string plan_in_words(const plan::Plan& p, const spec::TrainingSpec* t) {
  std::string out = fmt::format("  {}-way data parallel × {}-way tensor parallel{} × {} pipeline stage{}", p.dp, p.tp,
                                p.sequence_parallel && p.tp > 1 ? " (sequence parallel)" : "", p.pp,
                                p.pp > 1 ? "s" : "");
  if (p.virtual_pipeline_stages > 1) out += fmt::format(" of {} interleaved chunks", p.virtual_pipeline_stages);
  if (p.cp > 1)
    out += fmt::format(" × {}-way context parallel{}", p.cp,
                       p.cp_comm == plan::CpComm::kA2aP2p      ? fmt::format(" (a2a+p2p: heads over all-to-alls in groups of "
                                                                             "{}, the K/V ring over {} of them)",
                                                                             p.cp_a2a, p.cp / p.cp_a2a)
                       : p.cp_comm == plan::CpComm::kAllToAll  ? " (a2a: heads over an all-to-all)"
                       : p.cp_comm == plan::CpComm::kAllGather ? " (K/V all-gathered)"
                                                               : "");
  if (p.ep > 1 || p.etp > 1)
    out += fmt::format("; experts {}-way expert parallel × {}-way expert tensor parallel{}", p.ep, p.etp,
                       p.overlap_moe_a2a ? ", their all-to-alls overlapped with another micro-batch's compute" : "");
  out += fmt::format("; micro-batches of {} sequence{}, {} per iteration", p.micro_batch_size,
                     p.micro_batch_size > 1 ? "s" : "", p.grad_accum_steps);
  if (p.recompute == plan::Recompute::kSelective) {
    out += "; selective recompute where a layer is not fully recomputed";
    if (t && t->recompute_modules != spec::kRecomputeCoreAttn)
      out += " (Megatron's modules " + join(spec::recompute_module_names(t->recompute_modules)) + ")";
  }
  out += "\n";
  int64_t first = 0;
  for (size_t i = 0; i < p.stages.size(); ++i) {
    out += stage_in_words(p, i, first);
    first += p.stages[i].num_layers;
  }
  return out;
}

std::string engine_list(std::span<const engines::Engine> engines) {
  std::string out;
  for (auto e : engines) out += (out.empty() ? "" : ",") + std::string(engines::to_string(e));
  return out.empty() ? "-" : out;
}

}  // namespace mist::cli
