#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>

#include <fmt/format.h>

#include "cli/command.hpp"
#include "cli/commands.hpp"
#include "cli/job.hpp"
#include "cli/report.hpp"
#include "tuner/tuner.hpp"

namespace mist::cli {

namespace {

struct TuneArgs {
  JobArgs job;
  std::string space = "mist", out_file;
  bool exhaustive = false, json = false;
  int top = 5;
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
  std::string zero, ckpt;
  for (const auto& s : p.stages) {
    zero += std::to_string(s.zero);
    ckpt += (ckpt.empty() ? "" : ",") + std::to_string(s.ckpt_layers) + "/" + std::to_string(s.num_layers);
  }
  return fmt::format("dp {} tp {} pp {} mb {} G {}{} zero {} ckpt {}", p.dp, p.tp, p.pp, p.micro_batch_size,
                     p.grad_accum_steps, p.recompute == plan::Recompute::kSelective ? " sel" : "", zero, ckpt);
}

int tune(const TuneArgs& a, std::string& out, std::string& err) {
  JobArgs ja = a.job;
  ja.plan.clear();
  auto job = load_job(ja);
  if (!job) {
    err = "mist: invalid input: " + job.error().to_string() + "\n";
    return kExitInvalidInput;
  }
  tuner::TuneOptions o;
  auto space = tuner::named_space(a.space);
  if (!space) {
    err = "mist: invalid input: " + space.error().to_string() + "\n";
    return kExitInvalidInput;
  }
  o.space = *space;
  o.exhaustive = a.exhaustive;
  o.top = a.top;
  if (isatty(STDERR_FILENO)) o.progress = progress_bar;
  auto r = tuner::tune(job->model, job->cluster, job->training, o);
  if (!r) {
    err = "mist: " + r.error().to_string() + "\n";
    return kExitInvalidInput;
  }
  Json stats = {{"layouts", r->stats.layouts},
                {"stage_settings_evaluated", r->stats.stage_settings_evaluated},
                {"stage_settings_feasible", r->stats.stage_settings_feasible},
                {"plans_evaluated", r->stats.plans_evaluated},
                {"seconds", r->stats.seconds}};
  if (r->best.empty()) {
    // Nothing fits: say so, with the closest plan and what it lacks.
    std::string what = "no plan fits";
    Json j = {{"fits", false}, {"space", a.space}, {"stats", stats}};
    if (r->closest) {
      Job near = *job;
      near.plan = r->closest->plan;
      what += fmt::format("; the closest ({}) needs {} more GPU memory on its worst stage{}", layout(near.plan),
                          format_bytes(r->closest->shortfall_bytes),
                          r->closest->host_shortfall_bytes > 0
                              ? fmt::format(" and {} more host memory per node", format_bytes(r->closest->host_shortfall_bytes))
                              : "");
      j["closest"] = {{"plan", plan::plan_to_json(near.plan)},
                      {"shortfall_bytes", r->closest->shortfall_bytes},
                      {"host_shortfall_bytes", r->closest->host_shortfall_bytes}};
    }
    if (a.json) out = j.dump(2) + "\n";
    err = "mist: " + what + ". Add GPUs, use GPUs with more memory, or shorten the sequence.\n";
    return kExitNoFit;
  }
  Job best = *job;
  best.plan = r->best.front().plan;
  auto pred = predict(best);
  if (!pred) {
    err = "mist: internal error: the tuned plan does not predict: " + pred.error().to_string() + "\n";
    return kExitInternal;
  }
  if (!a.out_file.empty()) {
    std::ofstream f(a.out_file);
    f << plan::plan_to_json(best.plan).dump(2) << "\n";
    if (!f) {
      err = "mist: cannot write --out " + a.out_file + "\n";
      return kExitInvalidInput;
    }
  }
  if (a.json) {
    Json alts = Json::array();
    for (size_t i = 1; i < r->best.size(); ++i)
      alts.push_back({{"plan", plan::plan_to_json(r->best[i].plan)}, {"iteration_time_s", r->best[i].iteration_time_s}});
    out = Json{{"plan", plan::plan_to_json(best.plan)},
               {"prediction", prediction_json(best, *pred)},
               {"alternatives", alts},
               {"space", a.space},
               {"stats", stats}}
              .dump(2) +
          "\n";
    return kExitOk;
  }
  out = fmt::format("{:>3} {:>12} {:>12} {:>7} {:>11}  {}\n", "#", "iteration", "tokens/s", "MFU", "peak mem", "plan");
  for (size_t i = 0; i < r->best.size(); ++i) {
    const auto& cnd = r->best[i];
    const double tps = static_cast<double>(job->training.global_batch_size * job->training.seq_length) / cnd.iteration_time_s;
    out += fmt::format("{:>3} {:>12} {:>12.0f} {:>6.1f}% {:>11}  {}\n", i + 1, format_seconds(cnd.iteration_time_s), tps,
                       100 * pred->time.mfu * r->best[0].iteration_time_s / cnd.iteration_time_s,
                       format_bytes(cnd.peak_memory_bytes), layout(cnd.plan));
  }
  out += fmt::format("searched {} layouts, {} stage settings ({} fit) in {:.2f} s ({} space)\n\n", r->stats.layouts,
                     r->stats.stage_settings_evaluated, r->stats.stage_settings_feasible, r->stats.seconds, a.space);
  out += prediction_text(best, *pred);
  return kExitOk;
}

}  // namespace

std::vector<Command> add_tune_command(CLI::App& app) {
  auto a = std::make_shared<TuneArgs>();
  auto* t = app.add_subcommand("tune", "find the fastest plan that fits (the Mist search)");
  add_job_options(t, a->job, /*with_plan=*/false);
  t->add_option("--space", a->space, "search space: mist (everything), megatron or deepspeed (their usual knobs)")
      ->capture_default_str();
  t->add_flag("--exhaustive", a->exhaustive, "enumerate every plan without decomposition (small jobs; the oracle)");
  t->add_option("--top", a->top, "plans to list")->check(CLI::Range(1, 100))->capture_default_str();
  t->add_option("--out", a->out_file, "write the best plan (plan JSON) to this file");
  t->add_flag("--json", a->json, "print {plan, prediction, alternatives, stats} as JSON");
  return {{t, [a](std::string& out, std::string& err) { return tune(*a, out, err); }}};
}

}  // namespace mist::cli
