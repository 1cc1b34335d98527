#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>

#include <fmt/format.h>

#include "api/tune.hpp"
#include "cli/command.hpp"
#include "cli/commands.hpp"
#include "cli/job.hpp"
#include "cli/tune_progress.hpp"
#include "cli/tune_report.hpp"
#include "cli/html_report.hpp"
#include "analysis/pipeline_job.hpp"

namespace mist::cli {

namespace {

struct TuneArgs {
  JobArgs job;
  api::TuneRequest request;  // the options below but --out, --json and --progress
  std::string out_file;
  std::string html;  // --html: the report, written here
  bool json = false;
  bool progress = false;  // --progress: also when stderr is not a terminal
};

int tune(const TuneArgs& a, std::string& out, std::string& err) {
  JobArgs ja = a.job;
  ja.plan.clear();
  auto job = load_job(ja);
  if (!job) return invalid_input(err, job.error());
  api::TuneRequest request = a.request;
  // Progress only for a person watching, or when asked: a pipe gets nothing on stderr.
  if (const bool terminal = isatty(STDERR_FILENO); terminal || a.progress) request.progress = tune_progress(terminal);
  auto run = api::tune(std::move(*job), request);
  if (!run) return failed(err, run.error());
  if (!run->fits()) {
    if (a.json) out = api::tune_json(*run).dump(2) + "\n";
    err = "mist: " + no_fit_text(*run) + "\n";
    if (!a.html.empty()) err += "mist: note: no report written to " + a.html + ": it draws a plan that fits\n";
    return kExitNoFit;
  }
  if (!a.out_file.empty()) {
    std::ofstream f(a.out_file);
    f << plan::plan_to_json(run->best_job().plan).dump(2) << "\n";
    if (!f) {
      err = "mist: cannot write --out " + a.out_file + "\n";
      return kExitInvalidInput;
    }
  }
  if (!a.html.empty()) {
    const auto* pred = &run->result.best.front().prediction;  // what `mist predict` says of it
    const auto pj = analysis::pipeline_job(pred->plan, pred->time, pred->memory);
    auto sim = sim::simulate(pj);
    if (!sim) {
      err = "mist: internal error: simulation failed: " + sim.error().to_string() + "\n";
      return kExitInternal;
    }
    if (int code = write_html(a.html, tune_report(*run, pj, *sim), err)) return code;
  }
  out = a.json ? api::tune_json(*run).dump(2) + "\n" : tune_text(*run);
  return kExitOk;
}

}  // namespace

std::vector<Command> add_tune_command(CLI::App& app) {
  auto a = std::make_shared<TuneArgs>();
  auto* t = app.add_subcommand("tune", "find the fastest plan that fits (the Mist search)");
  add_job_options(t, a->job, /*with_plan=*/false);
  t->add_option("--space", a->request.space, "search space: mist (everything), megatron or deepspeed (their usual knobs)")
      ->capture_default_str();
  t->add_option("--engine", a->request.engine,
                "only plans this engine can run: megatron, deepspeed, torchtitan, or mist (everything); it also "
                "selects the time model's calibration for that stack (megatron's for mist)");
  add_calibration_options(t, a->request.calibration, /*with_engine=*/false);
  add_headroom_option(t, a->request.calibration);
  t->add_option("--virtual-stages", a->request.virtual_stages,
                 "interleaved model chunks per pipeline stage to try, e.g. 1,2,4 (default: the space's; mist: 1,2,4)");
  t->add_option("--solver", a->request.solver, "inter-stage solver: dp (exact dynamic programme) or milp (Mist's MILP on CBC)")
      ->capture_default_str();
  t->add_option("--milp-time-limit", a->request.milp_time_limit, "seconds per layout for --solver milp")->capture_default_str();
  t->add_option("--compare-to", a->request.compare_to,
                "your current configuration: Megatron-LM flags (one quoted string) or a DeepSpeed JSON file; "
                "prints the speedup of mist's plan over it");
  t->add_flag("--job-from-flags", a->request.job_from_flags,
              "with --compare-to: tune the job its flags state (global batch, sequence, precision, dropout, ...) "
              "instead of keeping the training file's settings");
  t->add_option("--compare-megatron-flags", a->request.compare_megatron_flags,
                "Megatron-DeepSpeed flags (TP/PP) that go with a DeepSpeed JSON in --compare-to");
  t->add_flag("--no-offload", a->request.no_offload,
              "keep every state on the GPU: no weights, gradients, optimizer states or activations in host memory");
  t->add_flag("--no-engines", a->request.no_engines,
              "without --engine: skip each engine's own search (the best plan Megatron-LM, DeepSpeed and torchtitan "
              "run)");
  t->add_flag("--no-rerank", a->request.no_rerank, "order the top plans by the closed form only, not by the event simulation");
  t->add_flag("--exhaustive", a->request.exhaustive, "enumerate every plan without decomposition (small jobs; the oracle)");
  t->add_option("--top", a->request.top, "plans to list")->check(CLI::Range(1, api::kMaxTop))->capture_default_str();
  t->add_option("--out", a->out_file, "write the best plan (plan JSON) to this file");
  t->add_option("--html", a->html,
                "write a report to this file: the chosen plan's memory and timeline, the candidates searched "
                "(time against memory, the frontier)");
  t->add_flag("--json", a->json, "print {plan, prediction, alternatives, engines, stats} as JSON");
  t->add_flag("--progress", a->progress, "show the search's progress on stderr even when it is not a terminal");
  return {{t, [a](std::string& out, std::string& err) { return tune(*a, out, err); }}};
}

}  // namespace mist::cli
