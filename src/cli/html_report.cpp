#include "cli/html_report.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/report.hpp"
#include "cli/html_sections.hpp"

namespace mist::cli {

std::string plan_one_line(const plan::Plan& p) {
  std::string out = fmt::format("dp {} × tp {}{} × pp {}", p.dp, p.tp, p.sequence_parallel ? " (sequence parallel)" : "",
                                p.pp);
  if (p.cp > 1)
    out += fmt::format(" × cp {}{}", p.cp,
                       p.cp_comm != plan::CpComm::kRing ? fmt::format(" ({})", plan::to_string(p.cp_comm)) : "");
  if (p.ep > 1 || p.etp > 1) out += fmt::format(", experts over ep {} etp {}", p.ep, p.etp);
  out += fmt::format("; micro-batch {}, {} per iteration", p.micro_batch_size, p.grad_accum_steps);
  if (p.virtual_pipeline_stages > 1) out += fmt::format("; interleaved, {} chunks per stage", p.virtual_pipeline_stages);
  if (p.recompute == plan::Recompute::kSelective) out += "; selective recompute";
  for (size_t i = 0; i < p.stages.size(); ++i) {
    const auto& s = p.stages[i];
    out += fmt::format("; stage {}: {} blocks, ZeRO {}", i, s.num_layers, s.zero);
    if (s.ckpt_layers > 0) out += fmt::format(", {} recomputed", s.ckpt_layers);
    const auto& o = s.offload;
    if (o.weights + o.gradients + o.optimizer_states + o.activations > 0)
      out += fmt::format(", offloads weights {:g}, gradients {:g}, optimizer {:g}, activations {:g}", o.weights,
                         o.gradients, o.optimizer_states, o.activations);
  }
  return out;
}

html::Report prediction_report(const std::string& command, const Job& job, const analysis::Prediction& pred,
                               const sim::PipelineJob& pj, const sim::SimResult& sim) {
  html::Report r;
  r.title = fmt::format("mist {}: {} on {} × {} {}", command, job.model.name, job.cluster.nodes,
                        job.cluster.gpus_per_node, job.cluster.gpu.name);
  r.summary = job_summary(job);
  r.summary.emplace_back("plan", plan_one_line(pred.plan));
  append_prediction_summary(r.summary, pred, sim);
  r.memory = memory_chart(pred.memory);
  r.timelines = timeline_charts(pj, sim);
  r.tables.push_back(memory_table(pred.memory));
  r.generator = kGenerator;
  return r;
}

int write_html(const std::string& path, const html::Report& r, std::string& err) {
  std::ofstream f(path, std::ios::binary);
  if (f) f << html::render(r);
  if (f) f.close();
  if (!f) {
    const int e = errno;
    err = fmt::format("mist: invalid input: --html: cannot write {}: {}\n", path,
                      e != 0 ? std::strerror(e) : "write failed");
    return kExitInvalidInput;
  }
  return kExitOk;
}

}  // namespace mist::cli
