// `mist simulate`: runs the discrete-event simulation of one iteration of a plan (src/sim/) on the
// stage times of the time model and the memory of the memory model, next to the closed form.
#include <fstream>
#include <memory>

#include <fmt/format.h>

#include "cli/command.hpp"
#include "cli/commands.hpp"
#include "cli/job.hpp"
#include "cli/html_report.hpp"
#include "analysis/pipeline_job.hpp"
#include "cli/report.hpp"
#include "job/prepare.hpp"
#include "sim/pipeline_sim.hpp"

namespace mist::cli {

namespace {

struct SimulateArgs {
  JobArgs job;
  CalibrationArgs calibration;
  std::string trace;
  std::string html;  // --html: the report, written here
  bool json = false;
};

Json result_json(const Job& job, const sim::PipelineJob& pj, const sim::SimResult& r,
                 const analysis::TimePrediction& t, const analysis::MemoryPrediction& m, const std::string& trace) {
  Json stages = Json::array();
  for (size_t i = 0; i < pj.stages.size(); ++i) {
    const auto& w = pj.stages[i];
    stages.push_back({{"index", i},
                      {"forward_s", w.fwd},
                      {"backward_s", w.bwd},
                      {"p2p_send_s", w.p2p_fwd},
                      {"first_forward_extra_s", w.first_fwd_extra},
                      {"last_backward_extra_s", w.last_bwd_extra},
                      {"stable_time_s", t.stages[i].stable_s},
                      {"delta_time_s", t.stages[i].delta_s},
                      {"compute_busy_s", r.compute_busy[i]},
                      {"compute_idle_s", r.makespan - r.compute_busy[i]},
                      {"collective_busy_s", r.collective_busy[i]},
                      {"simulated_peak_memory_bytes", r.peak_bytes[i]},
                      {"predicted_peak_memory_bytes", m.stages[i].peak_bytes}});
  }
  return Json{{"model", job.model.name},
              {"schedule", pj.virtual_stages > 1 ? "interleaved_1f1b" : "1f1b"},
              {"micro_batches", pj.micro_batches},
              {"virtual_stages", pj.virtual_stages},
              {"simulated_iteration_time_s", r.makespan},
              {"closed_form_iteration_time_s", t.iteration_time_s},
              {"closed_form_error", t.iteration_time_s / r.makespan - 1},
              {"events", r.events.size()},
              {"trace", trace.empty() ? Json(nullptr) : Json(trace)},
              {"stages", stages}};
}

std::string result_text(const Job& job, const sim::PipelineJob& pj, const sim::SimResult& r,
                        const analysis::TimePrediction& t, const analysis::MemoryPrediction& m) {
  const auto& p = job.plan;
  std::string out = fmt::format(
      "model {} on {} × {} {} | dp {} tp {} pp {} | {} micro-batches, {}\n", job.model.name, job.cluster.nodes,
      job.cluster.gpus_per_node, job.cluster.gpu.name, p.dp, p.tp, p.pp, pj.micro_batches,
      pj.virtual_stages > 1 ? fmt::format("interleaved 1F1B with {} chunks per stage", pj.virtual_stages)
                            : std::string("1F1B"));
  out += fmt::format("iteration time: simulated {}, closed form {} (closed form {:+.2f}% vs simulation)\n",
                     format_seconds(r.makespan), format_seconds(t.iteration_time_s),
                     100 * (t.iteration_time_s / r.makespan - 1));
  out += fmt::format("{:>5} {:>11} {:>11} {:>11} {:>11} {:>6} {:>11} {:>11} {:>11} {:>11}\n", "stage", "forward",
                     "backward", "first+", "last+", "idle", "busy", "collective", "peak (sim)", "peak (model)");
  for (size_t i = 0; i < pj.stages.size(); ++i) {
    const auto& w = pj.stages[i];
    out += fmt::format("{:>5} {:>11} {:>11} {:>11} {:>11} {:>5.1f}% {:>11} {:>11} {:>11} {:>11}\n", i,
                       format_seconds(w.fwd), format_seconds(w.bwd), format_seconds(w.first_fwd_extra),
                       format_seconds(w.last_bwd_extra), 100 * (1 - r.compute_busy[i] / r.makespan),
                       format_seconds(r.compute_busy[i]), format_seconds(r.collective_busy[i]),
                       format_bytes(r.peak_bytes[i]), format_bytes(m.stages[i].peak_bytes));
  }
  out += "forward/backward: per micro-batch; first+/last+: before the first forward / after the last backward;\n"
         "idle and busy: the compute stream over the iteration; collective: p2p sends and the extras.\n";
  return out;
}

int simulate(const SimulateArgs& a, std::string& out, std::string& err) {
  auto job = load_job(a.job);
  if (!job) return invalid_input(err, job.error());
  auto pred = api::predict(*job, a.calibration);
  if (!pred) return invalid_input(err, pred.error());
  const auto pj = analysis::pipeline_job(pred->plan, pred->time, pred->memory);
  auto r = sim::simulate(pj);
  if (!r) {  // the plan was validated: a failure here is a bug
    err = "mist: internal error: " + r.error().to_string() + "\n";
    return kExitInternal;
  }
  if (!a.trace.empty()) {
    std::ofstream f(a.trace);
    if (f) f << sim::chrome_trace(*r).dump() << "\n";
    if (!f) {
      err = fmt::format("mist: invalid input: --trace: cannot write {}\n", a.trace);
      return kExitInvalidInput;
    }
  }
  if (!a.html.empty())
    if (int code = write_html(a.html, prediction_report("simulate", *job, *pred, pj, *r), err)) return code;
  if (a.json) {
    out = result_json(*job, pj, *r, pred->time, pred->memory, a.trace).dump(2) + "\n";
  } else {
    out = result_text(*job, pj, *r, pred->time, pred->memory);
    if (!a.trace.empty())
      out += fmt::format("trace: {} ({} events; open it in https://ui.perfetto.dev or chrome://tracing)\n", a.trace,
                         r->events.size());
  }
  return kExitOk;
}

}  // namespace

std::vector<Command> add_simulate_command(CLI::App& app) {
  auto a = std::make_shared<SimulateArgs>();
  auto* s = app.add_subcommand("simulate", "simulate one iteration of a plan event by event (1F1B / interleaved)");
  add_job_options(s, a->job);
  s->add_option("--trace", a->trace, "write a Chrome trace (Perfetto-loadable JSON) of the iteration to this file");
  s->add_option("--html", a->html,
                "write a report to this file: memory per stage against capacity, the pipeline timeline");
  add_calibration_options(s, a->calibration);
  s->add_flag("--json", a->json, "print one JSON object instead of a table");
  return {{s, [a](std::string& out, std::string& err) { return simulate(*a, out, err); }}};
}

}  // namespace mist::cli
