#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>

#include <fmt/format.h>

#include "api/tune.hpp"
#include "cli/command.hpp"
#include "cli/commands.hpp"
#include "cli/job.hpp"
#include "cli/html_report.hpp"
#include "cli/report.hpp"
#include "analysis/pipeline_job.hpp"

namespace mist::cli {

namespace {

struct TuneArgs {
  JobArgs job;
  api::TuneRequest request;  // the options below but --out and --json
  std::string out_file;
  std::string html;  // --html: the report, written here
  bool json = false;
};

// A bar on stderr, only when a person is watching.
void progress_bar(double fraction) {
  const int width = 40, filled = static_cast<int>(fraction * width);
  std::fprintf(stderr, "\r[%s%s] %3.0f%%", std::string(static_cast<size_t>(filled), '#').c_str(),
               std::string(static_cast<size_t>(width - filled), ' ').c_str(), 100 * fraction);
  if (fraction >= 1) std::fprintf(stderr, "\r%*s\r", width + 8, "");
  std::fflush(stderr);
}

std::string layout(const plan::Plan& p) {
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
  return fmt::format("dp {} tp {} pp {}{}{} mb {} G {}{} zero {} ckpt {}{}", p.dp, p.tp, p.pp, v,
                     extra_degrees_text(p), p.micro_batch_size,
                     p.grad_accum_steps, p.recompute == plan::Recompute::kSelective ? " sel" : "", zero, ckpt,
                     offload.empty() ? "" : " offload" + offload);
}

int tune(const TuneArgs& a, std::string& out, std::string& err) {
  JobArgs ja = a.job;
  ja.plan.clear();
  auto job = load_job(ja);
  if (!job) return invalid_input(err, job.error());
  api::TuneRequest request = a.request;
  if (isatty(STDERR_FILENO)) request.progress = progress_bar;
  auto run = api::tune(std::move(*job), request);
  if (!run) return failed(err, run.error());
  const auto& r = run->result;
  if (!run->fits()) {
    // Nothing fits: say so, with the closest plan and what it lacks.
    std::string what = "no plan fits";
    if (r.closest)
      what += fmt::format("; the closest ({}) needs {} more GPU memory on its worst stage{}", layout(r.closest->plan),
                          format_bytes(r.closest->shortfall_bytes),
                          r.closest->host_shortfall_bytes > 0
                              ? fmt::format(" and {} more host memory per node", format_bytes(r.closest->host_shortfall_bytes))
                              : "");
    const auto& more = run->nodes_to_fit;
    const auto per_node = run->job.cluster.gpus_per_node;
    what += more ? fmt::format("; on {} GPUs ({} nodes of {}) a plan fits", *more * per_node, *more, per_node)
                 : fmt::format("; not even on {} GPUs", 16 * run->job.cluster.nodes * per_node);
    if (a.json) out = api::tune_json(*run).dump(2) + "\n";
    err = "mist: " + what + ". Add GPUs, use GPUs with more memory, or shorten the sequence.\n";
    if (!a.html.empty()) err += "mist: note: no report written to " + a.html + ": it draws a plan that fits\n";
    return kExitNoFit;
  }
  const Job best = run->best_job();
  const Prediction* pred = &r.best.front().prediction;  // what `mist predict` says of it
  if (!a.out_file.empty()) {
    std::ofstream f(a.out_file);
    f << plan::plan_to_json(best.plan).dump(2) << "\n";
    if (!f) {
      err = "mist: cannot write --out " + a.out_file + "\n";
      return kExitInvalidInput;
    }
  }
  if (!a.html.empty()) {
    const auto pj = analysis::pipeline_job(pred->plan, pred->time, pred->memory);
    auto sim = sim::simulate(pj);
    if (!sim) {
      err = "mist: internal error: simulation failed: " + sim.error().to_string() + "\n";
      return kExitInternal;
    }
    if (int code = write_html(a.html, tune_report(*run, pj, *sim), err)) return code;
  }
  if (a.json) {
    out = api::tune_json(*run).dump(2) + "\n";
    return kExitOk;
  }
  // The user's configuration, predicted like the tuned plan.
  std::string compare_text;
  if (run->current) {
    const auto& cp = run->current->prediction;
    const double mine = pred->time.iteration_time_s, theirs = cp.time.iteration_time_s;
    compare_text = fmt::format("your configuration ({}): {} per iteration{}; mist's plan: {} — {:.2f}x {}\n",
                               layout(run->current->plan), format_seconds(theirs),
                               cp.memory.fits ? "" : " but it does not fit in memory", format_seconds(mine),
                               theirs / mine, theirs >= mine ? "faster" : "(yours is faster: please report this)");
  }
  const auto& training = run->job.training;
  out = fmt::format("{:>3} {:>12} {:>12} {:>12} {:>7} {:>11}  {}\n", "#", "iteration", "simulated", "tokens/s", "MFU",
                    "peak mem", "plan");
  for (size_t i = 0; i < r.best.size(); ++i) {
    const auto& cnd = r.best[i];
    const double tps = static_cast<double>(training.global_batch_size * training.seq_length) / cnd.iteration_time_s;
    out += fmt::format("{:>3} {:>12} {:>12} {:>12.0f} {:>6.1f}% {:>11}  {}\n", i + 1, format_seconds(cnd.iteration_time_s),
                       cnd.simulated_time_s > 0 ? format_seconds(cnd.simulated_time_s) : "-", tps,
                       100 * pred->time.mfu * r.best[0].iteration_time_s / cnd.iteration_time_s,
                       format_bytes(cnd.peak_memory_bytes), layout(cnd.plan));
  }
  out += fmt::format("searched {} layouts ({} skipped by their lower bound), {} stage settings ({} fit, {} timed) in "
                     "{:.2f} s ({} space{})\n\n",
                     r.stats.layouts, r.stats.layouts_pruned, r.stats.stage_settings_evaluated,
                     r.stats.stage_settings_feasible, r.stats.stage_settings_timed, r.stats.seconds, run->space,
                     run->options.solver == tuner::InterStageSolver::kMilp ? ", MILP" : "");
  out += compare_text;
  if (!compare_text.empty()) out += "\n";
  out += prediction_text(best, *pred);
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
  t->add_option("--compare-megatron-flags", a->request.compare_megatron_flags,
                "Megatron-DeepSpeed flags (TP/PP) that go with a DeepSpeed JSON in --compare-to");
  t->add_flag("--no-offload", a->request.no_offload,
              "keep every state on the GPU: no weights, gradients, optimizer states or activations in host memory");
  t->add_flag("--no-rerank", a->request.no_rerank, "order the top plans by the closed form only, not by the event simulation");
  t->add_flag("--exhaustive", a->request.exhaustive, "enumerate every plan without decomposition (small jobs; the oracle)");
  t->add_option("--top", a->request.top, "plans to list")->check(CLI::Range(1, api::kMaxTop))->capture_default_str();
  t->add_option("--out", a->out_file, "write the best plan (plan JSON) to this file");
  t->add_option("--html", a->html,
                "write a report to this file: the chosen plan's memory and timeline, the candidates searched "
                "(time against memory, the frontier)");
  t->add_flag("--json", a->json, "print {plan, prediction, alternatives, stats} as JSON");
  return {{t, [a](std::string& out, std::string& err) { return tune(*a, out, err); }}};
}

}  // namespace mist::cli
