#include <memory>

#include "analysis/memory_model.hpp"
#include "cli/command.hpp"
#include "cli/commands.hpp"
#include "cli/job.hpp"
#include "cli/report.hpp"

namespace mist::cli {

namespace {

struct PredictArgs {
  JobArgs job;
  bool json = false;
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
  if (a.json)
    out = prediction_json(*job, *pred).dump(2) + "\n";
  else
    out = explain ? explanation_text(*job, *pred) : prediction_text(*job, *pred);
  return kExitOk;
}

}  // namespace

std::vector<Command> add_predict_commands(CLI::App& app) {
  auto pa = std::make_shared<PredictArgs>(), ea = std::make_shared<PredictArgs>();
  auto* p = app.add_subcommand("predict", "predict per-stage memory of a plan (and whether it fits)");
  add_job_options(p, pa->job);
  p->add_flag("--json", pa->json, "print one JSON object instead of a table");
  auto* e = app.add_subcommand("explain", "show every memory term of every stage: its formula and value");
  add_job_options(e, ea->job);
  e->add_flag("--json", ea->json, "print the prediction as JSON (same as predict --json)");
  return {{p, [pa](std::string& out, std::string& err) { return predict(*pa, false, out, err); }},
          {e, [ea](std::string& out, std::string& err) { return predict(*ea, true, out, err); }}};
}

}  // namespace mist::cli
