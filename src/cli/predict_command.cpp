#include <memory>
#include <optional>

#include <fmt/format.h>

#include "analysis/memory_model.hpp"
#include "cli/command.hpp"
#include "cli/commands.hpp"
#include "cli/job.hpp"
#include "cli/pipeline_job.hpp"
#include "cli/report.hpp"

namespace mist::cli {

namespace {

struct PredictArgs {
  JobArgs job;
  bool json = false;
  bool simulate = false;
};

int predict(const PredictArgs& a, bool explain, std::string& out, std::string& err) {
  auto job = load_job(a.job);
  if (!job) {
    err = "mist: invalid input: " + job.error().to_string() + "\n";
    return kExitInvalidInput;
  }
  auto pred = cli::predict(*job);
  if (!pred) {
    err = "mist: invalid input: " + pred.error().to_string() + "\n";
    return kExitInvalidInput;
  }
  // --simulate: the event simulation's iteration time replaces the closed form's.
  std::optional<sim::SimResult> simulated;
  if (a.simulate) {
    auto r = sim::simulate(pipeline_job(*job, pred->time, pred->memory));
    if (!r) {
      err = "mist: internal error: simulation failed: " + r.error().to_string() + "\n";
      return kExitInternal;
    }
    simulated = std::move(*r);
  }
  if (a.json) {
    Json j = prediction_json(*job, *pred);
    if (simulated) {
      j["closed_form_iteration_time_s"] = pred->time.iteration_time_s;
      j["iteration_time_s"] = simulated->makespan;
      const double scale = pred->time.iteration_time_s / simulated->makespan;
      j["tokens_per_s"] = pred->time.tokens_per_s * scale;
      j["model_tflops_per_gpu"] = pred->time.model_tflops_per_gpu * scale;
      j["mfu"] = pred->time.mfu * scale;
      j["simulated"] = true;
    }
    out = j.dump(2) + "\n";
  } else {
    out = explain ? explanation_text(*job, *pred) : prediction_text(*job, *pred);
    if (simulated)
      out += fmt::format("simulated iteration (1F1B event simulation): {} (closed form {}, {:+.2f}%)\n",
                         format_seconds(simulated->makespan), format_seconds(pred->time.iteration_time_s),
                         100 * (pred->time.iteration_time_s / simulated->makespan - 1));
  }
  return kExitOk;
}

}  // namespace

std::vector<Command> add_predict_commands(CLI::App& app) {
  auto pa = std::make_shared<PredictArgs>(), ea = std::make_shared<PredictArgs>();
  auto* p = app.add_subcommand("predict", "predict per-stage memory of a plan (and whether it fits)");
  add_job_options(p, pa->job);
  p->add_flag("--json", pa->json, "print one JSON object instead of a table");
  p->add_flag("--simulate", pa->simulate,
              "take the iteration time from the event simulation of the pipeline instead of the closed form");
  auto* e = app.add_subcommand("explain", "show every memory term of every stage: its formula and value");
  add_job_options(e, ea->job);
  e->add_flag("--json", ea->json, "print the prediction as JSON (same as predict --json)");
  return {{p, [pa](std::string& out, std::string& err) { return predict(*pa, false, out, err); }},
          {e, [ea](std::string& out, std::string& err) { return predict(*ea, true, out, err); }}};
}

}  // namespace mist::cli
