#include <memory>
#include <optional>

#include <fmt/format.h>

#include "cli/command.hpp"
#include "cli/commands.hpp"
#include "cli/job.hpp"
#include "cli/job_differences.hpp"
#include "cli/html_report.hpp"
#include "analysis/pipeline_job.hpp"
#include "profile/op_source.hpp"
#include "cli/report.hpp"
#include "job/prepare.hpp"

namespace mist::cli {

namespace {

struct PredictArgs {
  JobArgs job;
  CalibrationArgs calibration;
  std::string from_megatron;  // Megatron-LM flags instead of a plan file
  std::string html;  // --html: the report, written here
  bool job_from_flags = false;  // with --from-megatron: the flags' training settings replace the file's
  bool json = false;
  bool simulate = false;
};

// The job of `predict`/`explain`: from a plan file, or from an existing Megatron-LM command line.
// Training settings its flags imply otherwise than the training file (Megatron-LM's dropout
// defaults to 0.1) are listed in `current` and, as for tune --compare-to, the file's stand unless
// --job-from-flags.
Result<Job> load_predict_job(const PredictArgs& a, std::optional<api::CurrentImport>& current) {
  if (a.job.plan.empty() == a.from_megatron.empty())
    return fail("--plan", "give either --plan FILE or --from-megatron \"FLAGS\", not both or neither");
  if (a.job_from_flags && a.from_megatron.empty())
    return fail("--job-from-flags", "goes with --from-megatron");
  if (!a.from_megatron.empty()) {
    JobArgs ja = a.job;
    ja.plan.clear();
    MIST_TRY(Job job, load_job(ja));
    MIST_TRY(current, api::import_current(a.from_megatron, "", a.job_from_flags, job, "--from-megatron"));
    job.plan = current->imported.plan;
    job.training = current->training;
    return job;
  }
  return load_job(a.job);
}

int predict(const PredictArgs& a, bool explain, std::string& out, std::string& err) {
  std::optional<api::CurrentImport> current;
  auto job = load_predict_job(a, current);
  if (!job) return invalid_input(err, job.error());
  auto pred = api::predict(*job, a.calibration);
  if (!pred) return invalid_input(err, pred.error());
  // --simulate: the event simulation's iteration time replaces the closed form's. The report draws it.
  std::optional<sim::SimResult> simulated;
  const auto pj = analysis::pipeline_job(pred->plan, pred->time, pred->memory);
  if (a.simulate || !a.html.empty()) {
    auto r = sim::simulate(pj);
    if (!r) {
      err = "mist: internal error: simulation failed: " + r.error().to_string() + "\n";
      return kExitInternal;
    }
    if (!a.html.empty())
      if (int code = write_html(a.html, prediction_report("predict", *job, *pred, pj, *r), err)) return code;
    if (a.simulate) simulated = std::move(*r);
  }
  if (a.json) {
    Json j = prediction_json(*job, *pred);
    if (current) {
      if (!current->imported.notes.empty()) j["import_notes"] = current->imported.notes;
      j["job_differences"] = api::differences_json(current->differences);
      j["job_from"] = current->job_from_flags ? "flags" : "training_file";
    }
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
    if (explain) out += profile::describe(pred->time.op_sources) + " (docs/profile.md)\n";
    if (current) {
      out += job_differences_text(current->differences, current->job_from_flags, "predicted");
      for (const auto& n : current->imported.notes) out += "note (from the Megatron flags): " + n + "\n";
    }
    if (simulated)
      out += fmt::format("simulated iteration (1F1B event simulation): {} (closed form {}, {:+.2f}%)\n",
                         format_seconds(simulated->makespan), format_seconds(pred->time.iteration_time_s),
                         100 * (pred->time.iteration_time_s / simulated->makespan - 1));
  }
  return kExitOk;
}

void add_job_from_flags_option(CLI::App* c, bool& flag) {
  c->add_flag("--job-from-flags", flag,
              "with --from-megatron: predict the job its flags state (global batch, sequence, precision, dropout, "
              "...) instead of keeping the training file's settings");
}

}  // namespace

std::vector<Command> add_predict_commands(CLI::App& app) {
  auto pa = std::make_shared<PredictArgs>(), ea = std::make_shared<PredictArgs>();
  auto* p = app.add_subcommand("predict", "predict per-stage memory and iteration time of a plan");
  add_job_options(p, pa->job, /*with_plan=*/false);
  p->add_option("--plan", pa->job.plan, "plan JSON file: dp, tp, pp, micro_batch_size, grad_accum_steps, stages, ...");
  p->add_option("--from-megatron", pa->from_megatron,
                "an existing Megatron-LM command line (its parallel, batch and recompute flags) instead of --plan");
  add_job_from_flags_option(p, pa->job_from_flags);
  add_calibration_options(p, pa->calibration);
  p->add_flag("--json", pa->json, "print one JSON object instead of a table");
  p->add_flag("--simulate", pa->simulate,
              "take the iteration time from the event simulation of the pipeline instead of the closed form");
  p->add_option("--html", pa->html,
                "write a report to this file: memory per stage against capacity, the simulated pipeline timeline");
  auto* e = app.add_subcommand("explain", "show every memory and time term of every stage: formula and value");
  add_job_options(e, ea->job, /*with_plan=*/false);
  e->add_option("--plan", ea->job.plan, "plan JSON file");
  e->add_option("--from-megatron", ea->from_megatron, "an existing Megatron-LM command line instead of --plan");
  add_job_from_flags_option(e, ea->job_from_flags);
  add_calibration_options(e, ea->calibration);
  e->add_flag("--json", ea->json, "print the prediction as JSON (same as predict --json)");
  return {{p, [pa](std::string& out, std::string& err) { return predict(*pa, false, out, err); }},
          {e, [ea](std::string& out, std::string& err) { return predict(*ea, true, out, err); }}};
}

}  // namespace mist::cli
