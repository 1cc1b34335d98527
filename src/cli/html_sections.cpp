#include "cli/html_sections.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "cli/report.hpp"

namespace mist::cli {

namespace {

double term(const analysis::StageMemory& s, const std::string& name) {
  for (const auto& t : s.terms)
    if (t.name == name) return t.bytes;
  return 0;
}

const analysis::StageMemory* worst_stage(const analysis::MemoryPrediction& m) {
  if (m.stages.empty()) return nullptr;
  return &*std::max_element(m.stages.begin(), m.stages.end(),
                            [](const auto& a, const auto& b) { return a.peak_bytes < b.peak_bytes; });
}

}  // namespace

Summary job_summary(const Job& job) {
  const auto& m = job.model;
  const auto& c = job.cluster;
  const auto& t = job.training;
  return {{"model", fmt::format("{}: {} layers, hidden {}, {}", m.name, m.num_layers, m.hidden_size,
                                parameter_summary(m))},
          {"cluster", fmt::format("{} × {} {} ({} GPUs, {} each)", c.nodes, c.gpus_per_node, c.gpu.name, c.num_gpus(),
                                  format_bytes(c.gpu.memory_bytes))},
          {"training", fmt::format("global batch {}, sequence {}, {}", t.global_batch_size, t.seq_length,
                                   spec::precision_name(t))}};
}

void append_prediction_summary(Summary& s, const analysis::Prediction& pred, const sim::SimResult& sim) {
  const auto& t = pred.time;
  const auto& band = pred.time_band;
  s.emplace_back("iteration time",
                 fmt::format("{} (closed form; expected {} - {}, ±{:.1f}%); event simulation {}",
                             format_seconds(t.iteration_time_s), format_seconds(band.low), format_seconds(band.high),
                             100 * band.relative, format_seconds(sim.makespan)));
  s.emplace_back("throughput", fmt::format("{:.0f} tokens/s, {:.1f} model TFLOP/s per GPU, MFU {:.1f}%", t.tokens_per_s,
                                           t.model_tflops_per_gpu, 100 * t.mfu));
  if (const auto* w = worst_stage(pred.memory))
    s.emplace_back("memory", fmt::format("{} at stage {}'s peak of {} ({} usable with the headroom): {}",
                                         format_bytes(w->peak_bytes), w->index, format_bytes(w->capacity_bytes),
                                         format_bytes(w->usable_bytes),
                                         pred.memory.fits ? "the plan fits" : "the plan does NOT fit"));
  std::string calibration = calibration_text(pred.calibration);
  calibration = calibration.substr(0, calibration.find('\n'));
  s.emplace_back("calibration", calibration.starts_with("calibration: ") ? calibration.substr(13) : calibration);
}

html::MemoryChart memory_chart(const analysis::MemoryPrediction& m) {
  html::MemoryChart c;
  for (const auto& s : m.stages) {
    const double w = term(s, "weights"), g = term(s, "gradients"), o = term(s, "optimizer_states"),
                 a = term(s, "activations");
    c.stages.push_back(html::StageMemoryBar{.label = fmt::format("stage {}", s.index),
                                            .segments = {{"weights", w},
                                                         {"gradients", g},
                                                         {"optimizer states", o},
                                                         {"activations", a},
                                                         {"other", std::max(0.0, s.peak_bytes - w - g - o - a)}},
                                            .capacity_bytes = s.capacity_bytes,
                                            .usable_bytes = s.usable_bytes});
  }
  c.note = "Bars: the peak of one GPU of each stage, by term (other: the allocator's reserve beyond the tensors, "
           "CUDA context, NCCL and workspace buffers). The band under the capacity line is the headroom the plan "
           "must leave free; a bar above the band's lower edge does not fit.";
  return c;
}

html::Table memory_table(const analysis::MemoryPrediction& m) {
  html::Table t{.id = "memory-table",
                .caption = "Memory per GPU at each stage's peak",
                .header = {"stage", "blocks", "recomputed", "weights", "gradients", "optimizer", "activations",
                           "peak", "capacity", "fits"},
                .rows = {}};
  for (const auto& s : m.stages)
    t.rows.push_back({std::to_string(s.index), std::to_string(s.num_layers), std::to_string(s.ckpt_layers),
                      format_bytes(term(s, "weights")), format_bytes(term(s, "gradients")),
                      format_bytes(term(s, "optimizer_states")), format_bytes(term(s, "activations")),
                      format_bytes(s.peak_bytes), format_bytes(s.capacity_bytes),
                      s.fits ? "yes" : "no, short " + format_bytes(s.peak_bytes - s.usable_bytes)});
  return t;
}

std::vector<html::TimelineChart> timeline_charts(const sim::PipelineJob& pj, const sim::SimResult& r) {
  html::TimelineChart c;
  c.stages = static_cast<int>(pj.stages.size());
  c.makespan_s = r.makespan;
  for (const auto& e : r.events) {
    const auto kind = e.stream == sim::Stream::kCompute
                          ? (e.name.starts_with("F") ? html::BlockKind::kForward : html::BlockKind::kBackward)
                      : e.stream == sim::Stream::kCollective ? html::BlockKind::kCommunication
                                                             : html::BlockKind::kCopy;
    c.blocks.push_back(html::TimelineBlock{.stage = e.stage, .kind = kind, .name = e.name, .start_s = e.start, .end_s = e.end});
  }
  c.note = fmt::format("{}, {} micro-batches; F3 is the forward of micro-batch 3, B3 its backward{}. The thin row under "
                       "each stage is its collective stream (p2p sends, gradient reduction, parameter gathers) and "
                       "offload copies. {} events; makespan {}.",
                       pj.virtual_stages > 1 ? fmt::format("interleaved 1F1B with {} chunks per stage", pj.virtual_stages)
                                             : std::string("1F1B"),
                       pj.micro_batches, pj.virtual_stages > 1 ? " (.c1: chunk 1)" : "", r.events.size(),
                       format_seconds(r.makespan));
  std::vector<html::TimelineChart> charts = {c};
  if (pj.micro_batches <= 12) return charts;
  // The close-up: until stage 0 has run as many tasks as fill the pipeline twice, and 8 more.
  const size_t wanted = static_cast<size_t>(4 * c.stages * pj.virtual_stages + 8);
  size_t seen = 0;
  for (const auto& e : r.events)
    if (e.stage == 0 && e.stream == sim::Stream::kCompute && ++seen == wanted) {
      html::TimelineChart zoom = c;
      zoom.id = "timeline-start";
      zoom.title = "The start of the iteration: the pipeline filling";
      zoom.window_s = e.end;
      zoom.note = fmt::format("The second chart shows the first {} of the iteration.", format_seconds(e.end));
      charts.push_back(std::move(zoom));
      break;
    }
  return charts;
}

}  // namespace mist::cli
