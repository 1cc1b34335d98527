#include "cli/tune_report.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "cli/job_differences.hpp"
#include "cli/plan_text.hpp"
#include "cli/report.hpp"

namespace mist::cli {

namespace {

std::string signed_percent(double gap) { return fmt::format("{:+.1f}%", 100 * gap); }

std::string term_name(const std::string& term) {
  if (term == "tp_communication") return "tensor-parallel communication";
  if (term == "pipeline_p2p") return "pipeline sends";
  if (term == "pipeline_bubble") return "pipeline bubble";
  if (term == "exposed_sync") return "exposed gradient sync and optimizer step";
  return term;
}

std::string plans_table(const api::TuneRun& run) {
  const auto& r = run.result;
  std::vector<std::string> runs_on;
  size_t width = 7;
  for (const auto& e : run.runnable_on) width = std::max(width, runs_on.emplace_back(engine_list(e)).size());
  const auto& training = run.job.training;
  const double best_mfu = r.best[0].prediction.time.mfu;
  std::string out = fmt::format("{:>3} {:>12} {:>12} {:>12} {:>7} {:>11} {:>7}  {:<{}}  {}\n", "#", "iteration",
                                "simulated", "tokens/s", "MFU", "peak mem", "gap", "runs on", width, "plan");
  for (size_t i = 0; i < r.best.size(); ++i) {
    const auto& cnd = r.best[i];
    const double tps = static_cast<double>(training.global_batch_size * training.seq_length) / cnd.iteration_time_s;
    out += fmt::format("{:>3} {:>12} {:>12} {:>12.0f} {:>6.1f}% {:>11} {:>7}  {:<{}}  {}\n", i + 1,
                       format_seconds(cnd.iteration_time_s),
                       cnd.simulated_time_s > 0 ? format_seconds(cnd.simulated_time_s) : "-", tps,
                       100 * best_mfu * r.best[0].iteration_time_s / cnd.iteration_time_s,
                       format_bytes(cnd.peak_memory_bytes), i == 0 ? "-" : signed_percent(run.gap(i)), runs_on[i],
                       width, plan_compact(cnd.plan));
  }
  return out;
}

// Why #1 leads #2: the terms of their iterations that differ most, and their memory.
std::string decided_text(const api::TuneRun& run) {
  if (run.decided_by.empty()) return "";
  const auto& a = run.result.best[0];
  const auto& b = run.result.best[1];
  std::vector<std::string> parts;
  const double noise = 1e-4 * a.iteration_time_s;
  for (const auto& d : run.decided_by) {
    if (parts.size() == 3 || std::fabs(d.difference_s()) <= noise) break;
    parts.push_back(fmt::format("{} {} {}", term_name(d.best.name), format_seconds(std::fabs(d.difference_s())),
                                d.difference_s() > 0 ? "less" : "more"));
  }
  const std::string memory =
      fmt::format("peak memory {} against {}", format_bytes(a.peak_memory_bytes), format_bytes(b.peak_memory_bytes));
  if (parts.empty())
    return fmt::format("#1 and #2 take the same time ({} per iteration); {}\n", format_seconds(a.iteration_time_s),
                       memory);
  std::string out = fmt::format("#1 leads #2 by {}: {}; {}", signed_percent(run.gap(1)).substr(1), join(parts), memory);
  if (a.iteration_time_s > b.iteration_time_s)
    out += fmt::format(" (the closed form puts #2 ahead by {}; the event simulation ordered them)",
                       format_seconds(a.iteration_time_s - b.iteration_time_s));
  return out + "\n";
}

std::string engines_text(const api::TuneRun& run) {
  if (run.engines.empty()) return "";
  std::string out =
      "each engine's best plan (as `mist tune --engine E` finds it, timed with that stack's calibration; gap: "
      "slower than #1\ntimed with the same calibration):\n";
  out += fmt::format("  {:<11} {:>12} {:>12} {:>12} {:>7}  {}\n", "engine", "iteration", "simulated", "tokens/s",
                     "gap", "plan");
  for (const auto& e : run.engines) {
    const char* name = engines::to_string(e.engine);
    if (!e.best) {
      out += fmt::format("  {:<11} {}\n", name, e.reason);
      continue;
    }
    const double sim = e.best->simulated_time_s;
    out += fmt::format("  {:<11} {:>12} {:>12} {:>12.0f} {:>7}  {}\n", name, format_seconds(e.best->iteration_time_s),
                       sim > 0 ? format_seconds(sim) : "-", e.best->prediction.time.tokens_per_s,
                       signed_percent(e.gap()), plan_compact(e.best->plan));
  }
  return out;
}

// The user's configuration, predicted like the tuned plan, and the training settings its flags
// imply otherwise than the file.
std::string compare_text(const api::TuneRun& run) {
  if (!run.current) return "";
  const auto& c = *run.current;
  std::string out;
  out += job_differences_text(c.job_differences, c.job_from_flags, "tuned and compared");
  for (const auto& n : c.import_notes) out += "  note: " + n + "\n";
  const double mine = run.result.best[0].prediction.time.iteration_time_s, theirs = c.prediction.time.iteration_time_s;
  out += fmt::format("your configuration ({}): {} per iteration{}; mist's plan: {} — {:.2f}x {}\n",
                     plan_compact(c.plan), format_seconds(theirs),
                     c.prediction.memory.fits ? "" : " but it does not fit in memory", format_seconds(mine),
                     theirs / mine, theirs >= mine ? "faster" : "(yours is faster: please report this)");
  return out;
}

}  // namespace

std::string tune_text(const api::TuneRun& run) {
  const auto& r = run.result;
  std::string out = plans_table(run);
  out += fmt::format("searched {} layouts ({} skipped by their lower bound), {} stage settings ({} fit, {} timed) in "
                     "{:.2f} s ({} space{})\n",
                     r.stats.layouts, r.stats.layouts_pruned, r.stats.stage_settings_evaluated,
                     r.stats.stage_settings_feasible, r.stats.stage_settings_timed, r.stats.seconds, run.space,
                     run.options.solver == tuner::InterStageSolver::kMilp ? ", MILP" : "");
  out += plan_legend() + "\n";
  const job::Job best = run.best_job();
  out += "#1 in words:\n" + plan_in_words(r.best[0].plan, &best.training);
  out += decided_text(run) + "\n";
  if (const auto e = engines_text(run); !e.empty()) out += e + "\n";
  if (const auto c = compare_text(run); !c.empty()) out += c + "\n";
  out += prediction_text(run.best_job(), r.best[0].prediction);
  return out;
}

std::string no_fit_text(const api::TuneRun& run) {
  const auto& r = run.result;
  std::string what = "no plan fits";
  if (r.closest)
    what += fmt::format("; the closest ({}) needs {} more GPU memory on its worst stage{}", plan_compact(r.closest->plan),
                        format_bytes(r.closest->shortfall_bytes),
                        r.closest->host_shortfall_bytes > 0
                            ? fmt::format(" and {} more host memory per node", format_bytes(r.closest->host_shortfall_bytes))
                            : "");
  const auto& more = run.nodes_to_fit;
  const auto per_node = run.job.cluster.gpus_per_node;
  what += more ? fmt::format("; on {} GPUs ({} nodes of {}) a plan fits", *more * per_node, *more, per_node)
               : fmt::format("; not even on {} GPUs", 16 * run.job.cluster.nodes * per_node);
  return what + ". Add GPUs, use GPUs with more memory, or shorten the sequence.";
}

}  // namespace mist::cli
