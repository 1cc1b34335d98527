// The reports of the searches: tune's candidates and gpus's cells (html_report.hpp).
#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/html_report.hpp"
#include "cli/html_sections.hpp"
#include "cli/report.hpp"

namespace mist::cli {

namespace {

// The explored plans, the chosen one marked; it is added with its prediction's figures when the
// last search round did not produce it (an earlier round with more memory left free did).
// "dp 8 × tp 2 × pp 1, micro-batch 8": beside the chosen point.
std::string plan_tag(const plan::Plan& p) {
  return fmt::format("chosen: dp {} × tp {} × pp {}{}, micro-batch {}", p.dp, p.tp, p.pp,
                     p.virtual_pipeline_stages > 1 ? fmt::format(" (v {})", p.virtual_pipeline_stages) : "",
                     p.micro_batch_size);
}

html::CandidatesChart candidates_chart(const api::TuneRun& run) {
  const auto& r = run.result;
  const auto& chosen = r.best.front();
  html::CandidatesChart c;
  bool found = false;
  for (const auto& e : r.explored) {
    const bool is_chosen = e.plan == chosen.plan;
    found = found || is_chosen;
    c.plans.push_back(html::CandidatePlan{.label = plan_one_line(e.plan),
                                          .tag = is_chosen ? plan_tag(e.plan) : "",
                                          .peak_bytes = e.peak_memory_bytes,
                                          .iteration_time_s = e.iteration_time_s,
                                          .chosen = is_chosen});
  }
  if (!found) {
    double peak = 0;
    for (const auto& s : chosen.prediction.memory.stages) peak = std::max(peak, s.estimated_peak_bytes);
    c.plans.push_back(html::CandidatePlan{.label = plan_one_line(chosen.plan),
                                          .tag = plan_tag(chosen.plan),
                                          .peak_bytes = peak,
                                          .iteration_time_s = chosen.iteration_time_s,
                                          .chosen = true});
  }
  c.capacity_bytes = run.job.cluster.gpu.memory_bytes;
  const auto& stages = chosen.prediction.memory.stages;
  c.usable_bytes = stages.empty() ? c.capacity_bytes : stages.front().usable_bytes;
  c.note = fmt::format(
      "{} plans: the best plan of each parallel layout the search completed (at most {}; a layout whose lower bound "
      "could not beat the plans already found has none), by the search's own figures: the closed-form iteration "
      "time and the worst stage's peak as the memory model estimates the allocator's reserve. The chosen plan "
      "(diamond) is the fastest of the top {} by the event simulation{}; the frontier joins the plans that no other "
      "is both faster and smaller than. The band left of the capacity line is the headroom.",
      c.plans.size(), tuner::kMaxExplored, r.best.size(), run.options.rerank_by_simulation ? "" : " (here: by the closed form)");
  return c;
}

html::Table top_plans_table(const api::TuneRun& run) {
  const auto& t = run.job.training;
  html::Table table{.id = "top-plans",
                    .caption = "The top plans, as mist predict predicts them",
                    .header = {"#", "iteration", "simulated", "tokens/s", "peak memory", "plan"},
                    .rows = {}};
  for (size_t i = 0; i < run.result.best.size(); ++i) {
    const auto& c = run.result.best[i];
    table.rows.push_back({std::to_string(i + 1), format_seconds(c.iteration_time_s),
                          c.simulated_time_s > 0 ? format_seconds(c.simulated_time_s) : "-",
                          fmt::format("{:.0f}", static_cast<double>(t.global_batch_size * t.seq_length) /
                                                    c.iteration_time_s),
                          format_bytes(c.peak_memory_bytes), plan_one_line(c.plan)});
  }
  return table;
}

html::Table frontier_table(const html::CandidatesChart& c) {
  html::Table table{.id = "frontier-plans",
                    .caption = "The frontier of the candidates: each plan faster than every smaller one",
                    .header = {"peak memory (search)", "iteration (closed form)", "chosen", "plan"},
                    .rows = {}};
  for (const auto& p : html::frontier(c))
    table.rows.push_back({format_bytes(p.peak_bytes), format_seconds(p.iteration_time_s), p.chosen ? "yes" : "", p.label});
  return table;
}

std::string money(double usd) { return usd >= 1e4 ? fmt::format("${:.0f}k", usd / 1e3) : fmt::format("${:.2f}", usd); }

std::string duration(double s) {
  return s >= 2 * 86400 ? fmt::format("{:.1f} d", s / 86400) : fmt::format("{:.1f} h", s / 3600);
}

}  // namespace

html::Report tune_report(const api::TuneRun& run, const sim::PipelineJob& pj, const sim::SimResult& sim) {
  const auto& best = run.result.best.front();
  html::Report r = prediction_report("tune", run.best_job(), best.prediction, pj, sim);
  const auto& st = run.result.stats;
  r.summary.emplace_back("search", fmt::format("{} space{}: {} layouts ({} skipped by their lower bound), {} stage "
                                               "settings ({} fit, {} timed)",
                                               run.space, run.options.solver == tuner::InterStageSolver::kMilp ? ", MILP" : "",
                                               st.layouts, st.layouts_pruned, st.stage_settings_evaluated,
                                               st.stage_settings_feasible, st.stage_settings_timed));
  r.candidates = candidates_chart(run);
  r.tables.insert(r.tables.begin(), {top_plans_table(run), frontier_table(*r.candidates)});
  return r;
}

html::Report gpus_report(const spec::ModelSpec& model, const spec::TrainingSpec& training,
                         const api::GpusRequest& request, const advisor::Comparison& cmp) {
  html::Report r;
  r.title = fmt::format("mist gpus: {} on {}", model.name, fmt::join(request.candidates, ", "));
  r.summary = {{"model", fmt::format("{}: {} layers, hidden {}, {}", model.name, model.num_layers, model.hidden_size,
                                     parameter_summary(model))},
               {"training", fmt::format("global batch {}, sequence {}, {}; {:g} tokens to train", training.global_batch_size,
                                        training.seq_length, spec::precision_name(training), request.tokens)},
               {"search", fmt::format("{} space, GPU counts {}", request.space_name(), fmt::join(request.counts, ", "))}};
  html::GpusChart chart;
  std::vector<std::string> left_out;
  html::Table table{.id = "gpus-table",
                    .caption = "Every cell (GPU type × count), by total cost",
                    .header = {"GPU", "GPUs", "fits", "tokens/s", "MFU", "time", "$/hour", "total", "Pareto", "plan"},
                    .rows = {}};
  for (const auto& row : cmp.rows) {
    const std::string label = fmt::format("{} × {}", row.gpu, row.num_gpus);
    const bool costed = row.feasible && row.price;
    if (costed)
      chart.cells.push_back(html::GpuCell{
          .label = label, .cost_usd = row.cost.usd_total, .time_to_train_s = row.time_to_train_s, .pareto = row.pareto});
    else
      left_out.push_back(label + (row.feasible ? " (no price)" : " (does not fit)"));
    table.rows.push_back({row.gpu, std::to_string(row.num_gpus), row.feasible ? "yes" : "no",
                          row.feasible ? fmt::format("{:.0f}", row.tokens_per_s) : "-",
                          row.feasible ? fmt::format("{:.1f}%", 100 * row.mfu) : "-",
                          row.feasible ? duration(row.time_to_train_s) : "-",
                          costed ? money(row.cost.usd_per_hour) : "-", costed ? money(row.cost.usd_total) : "-",
                          row.pareto ? "yes" : "", row.feasible ? plan_one_line(*row.plan) : row.reason});
  }
  chart.note = "One point per cell that fits and has a price: the total cost and time to train the tokens with the "
               "tuned plan. The Pareto set (red, joined) holds the cells no other is both faster and cheaper than.";
  if (!left_out.empty()) chart.note += fmt::format(" Not drawn: {}.", fmt::join(left_out, ", "));
  r.gpus = chart;
  r.tables.push_back(table);
  r.generator = kGenerator;
  return r;
}

}  // namespace mist::cli
