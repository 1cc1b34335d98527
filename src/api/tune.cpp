#include "api/tune.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>

#include <fmt/format.h>

#include "analysis/pipeline_job.hpp"
#include "api/prediction_json.hpp"
#include "core/units.hpp"
#include "export/exchange.hpp"
#include "tuner/nodes_to_fit.hpp"

namespace mist::api {

namespace {

Json stats_json(const tuner::TuneStats& s) {
  return {{"layouts", s.layouts},
          {"layouts_pruned", s.layouts_pruned},
          {"stage_settings_evaluated", s.stage_settings_evaluated},
          {"stage_settings_feasible", s.stage_settings_feasible},
          {"stage_settings_timed", s.stage_settings_timed},
          {"plans_evaluated", s.plans_evaluated},
          {"programs_compiled", s.programs_compiled},
          {"milp_solves", s.milp_solves},
          {"milp_time_limits", s.milp_time_limits},
          {"engine_adjusted", s.engine_adjusted},
          {"rejected_by_allocator", s.rejected_by_allocator}};  // no wall-clock time: --json depends on the input only
}

// One search: the calibration of the request's engine (megatron's for the full space), the job
// prepared with it, and the tuner.
struct Searched {
  analysis::PreparedJob prepared;
  tuner::TuneResult result;
};

Outcome<Searched> search(const job::Job& job, const TuneRequest& r, tuner::TuneOptions options,
                         const std::string& name) {
  if (r.progress) options.progress = [&r, name](const tuner::Progress& at) { r.progress({name, at}); };
  Calibration calibration = r.calibration;
  if (options.engine) calibration.engine = engines::to_string(*options.engine);
  MIST_TRY(auto prepare, prepare_options(calibration));
  MIST_TRY(auto prepared, job::prepare(job, prepare));
  auto result = tuner::tune(prepared, options);
  if (!result) return std::unexpected(Failure(result.error(), Failure::Kind::kSearch));
  return Searched{std::move(prepared), std::move(*result)};
}

std::string calibration_name(const analysis::Calibration& c) {
  return c.kind == "stack" ? c.stack : c.kind == "file" ? "the cluster's time_constants" : "none";
}

// Engine `e`'s best plan for the job, as `tune --engine E` with the request's other options finds
// it; `mist_plan` (the full space's best) is timed with the same calibration. A job the engine
// cannot run at all (a model only Megatron-Core runs, a precision) is a reason, not an error.
Outcome<EngineBest> engine_best(const job::Job& job, const TuneRequest& r, engines::Engine e,
                                const plan::Plan& mist_plan) {
  EngineBest out;
  out.engine = e;
  TuneRequest er = r;
  er.engine = engines::to_string(e);
  er.space = "mist";
  MIST_TRY(auto options, tune_options(er));
  auto searched = search(job, er, options, er.engine);
  if (!searched) {
    if (searched.error().kind == Failure::Kind::kInternal) return std::unexpected(searched.error());
    // A training field names itself; an option ("--engine: ...") is one this run was not given.
    const Error& why = searched.error().error;
    out.reason = why.path.starts_with("--") ? why.message : why.to_string();
    return out;
  }
  auto& [prepared, result] = *searched;
  if (result.best.empty()) {
    out.reason = "no plan it runs fits";
    if (result.closest) {
      out.shortfall_bytes = result.closest->shortfall_bytes;
      out.reason += fmt::format("; the closest needs {:.2f} GiB more GPU memory on its worst stage",
                                out.shortfall_bytes / units::kGiB);
    }
    return out;
  }
  out.best = std::move(result.best.front());
  out.calibration = calibration_name(out.best->prediction.calibration);
  MIST_TRY(auto theirs, analysis::predict(prepared, mist_plan));
  out.mist_plan_time_s = theirs.time.iteration_time_s;
  if (options.rerank_by_simulation) {
    MIST_TRY(auto sim, sim::simulate(analysis::pipeline_job(mist_plan, theirs.time, theirs.memory)));
    out.mist_plan_simulated_s = sim.makespan;
  }
  return out;
}

Json names(const std::vector<engines::Engine>& engines) {
  Json out = Json::array();
  for (auto e : engines) out.push_back(engines::to_string(e));
  return out;
}

Json engine_json(const EngineBest& e) {
  Json j = {{"engine", engines::to_string(e.engine)}, {"feasible", e.best.has_value()}};
  if (!e.best) {
    j["reason"] = e.reason;
    if (e.shortfall_bytes > 0) j["shortfall_bytes"] = e.shortfall_bytes;
    return j;
  }
  j["plan"] = plan::plan_to_json(e.best->plan);
  j["iteration_time_s"] = e.best->iteration_time_s;
  j["simulated_time_s"] = e.best->simulated_time_s;
  j["tokens_per_s"] = e.best->prediction.time.tokens_per_s;
  j["calibration"] = e.calibration;
  j["mist_plan_time_s"] = e.mist_plan_time_s;
  j["mist_plan_simulated_s"] = e.mist_plan_simulated_s;
  j["gap"] = e.gap();
  return j;
}

// The best plan's iteration against the runner-up's, term by term, largest difference first.
std::vector<TermDifference> decided_by(const std::vector<tuner::Candidate>& best) {
  if (best.size() < 2) return {};
  const auto a = analysis::iteration_breakdown(best[0].prediction.time, best[0].plan.grad_accum_steps);
  const auto b = analysis::iteration_breakdown(best[1].prediction.time, best[1].plan.grad_accum_steps);
  std::vector<TermDifference> out;
  for (size_t i = 0; i < a.size(); ++i) out.push_back({a[i], b[i]});
  std::stable_sort(out.begin(), out.end(), [](const TermDifference& x, const TermDifference& y) {
    return std::fabs(x.difference_s()) > std::fabs(y.difference_s());
  });
  return out;
}

}  // namespace

double TuneRun::ranked_time_s(const tuner::Candidate& c) const {
  return options.rerank_by_simulation && c.simulated_time_s > 0 ? c.simulated_time_s : c.iteration_time_s;
}

job::Job TuneRun::best_job() const {
  job::Job best = job;
  best.plan = result.best.front().plan;
  return best;
}

Result<std::vector<int64_t>> parse_virtual_stages(const std::string& text) {
  std::vector<int64_t> out;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc{} || end != item.data() + item.size() || v < 1 || v > plan::kMaxVirtual)
      return fail("--virtual-stages", fmt::format("must be a comma-separated list of integers 1..{}; got \"{}\"",
                                                  plan::kMaxVirtual, text));
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
    at = comma + 1;
  }
  return out;
}

Result<tuner::TuneOptions> tune_options(const TuneRequest& r) {
  tuner::TuneOptions o;
  if (!r.engine.empty() && r.engine != "mist") {
    if (r.space != "mist") return fail("--engine", "give --engine or --space, not both");
    MIST_TRY(auto e, engines::engine_from_string(r.engine));
    o.engine = e;
    o.space = tuner::engine_space(e);
  } else {
    MIST_TRY(o.space, tuner::named_space(r.space));
  }
  if (!r.virtual_stages.empty()) {
    MIST_TRY(o.space.virtual_stages, parse_virtual_stages(r.virtual_stages));
  }
  if (r.no_offload) o.space.weight_offload = o.space.grad_offload = o.space.opt_offload = o.space.act_offload = {0};
  if (r.solver == "milp")
    o.solver = tuner::InterStageSolver::kMilp;
  else if (r.solver != "dp")
    return fail("--solver", "must be dp or milp; got \"" + r.solver + "\"");
  if (!(r.milp_time_limit > 0)) return fail("--milp-time-limit", "must be > 0 seconds");
  o.milp_time_limit_s = r.milp_time_limit;
  if (r.top < 1 || r.top > kMaxTop) return fail("--top", fmt::format("must be 1..{}; got {}", kMaxTop, r.top));
  o.exhaustive = r.exhaustive;
  o.top = r.top;
  o.rerank_by_simulation = !r.no_rerank;
  return o;
}

Outcome<TuneRun> tune(job::Job job, const TuneRequest& r) {
  TuneRun run;
  MIST_TRY(run.options, tune_options(r));
  std::optional<CurrentImport> imported;  // --compare-to
  if (!r.compare_to.empty()) {
    MIST_TRY(imported, import_current(r.compare_to, r.compare_megatron_flags, r.job_from_flags, job));
    job.training = imported->training;
  }
  MIST_TRY(auto searched, search(job, r, run.options, "mist"));
  auto& [prepared, result] = searched;
  run.result = std::move(result);
  run.space = run.options.engine ? engines::to_string(*run.options.engine) : r.space;
  if (run.result.best.empty()) {
    MIST_TRY(run.nodes_to_fit, tuner::nodes_to_fit(prepared, run.options));
    run.job = std::move(job);
    return run;
  }
  if (imported) {
    const auto& plan = imported->imported.plan;
    MIST_TRY(auto prediction, analysis::predict(prepared, plan));
    run.current = CurrentConfig{plan, std::move(prediction), imported->imported.notes, imported->differences,
                                imported->job_from_flags};
  }
  for (const auto& c : run.result.best) {
    job::Job listed = job;
    listed.plan = c.plan;
    run.runnable_on.push_back(engines::runnable_on(listed));
  }
  if (!run.options.engine && r.space == "mist" && !r.no_engines)
    for (engines::Engine e : engines::all_engines()) {
      MIST_TRY(auto best, engine_best(job, r, e, run.result.best.front().plan));
      run.engines.push_back(std::move(best));
    }
  run.decided_by = decided_by(run.result.best);
  run.job = std::move(job);
  return run;
}

Json tune_json(const TuneRun& run) {
  const auto& r = run.result;
  Json stats = stats_json(r.stats);
  if (!run.fits()) {
    Json j = {{"fits", false}, {"space", run.space}, {"stats", stats}};
    if (r.closest)
      j["closest"] = {{"plan", plan::plan_to_json(r.closest->plan)},
                      {"shortfall_bytes", r.closest->shortfall_bytes},
                      {"host_shortfall_bytes", r.closest->host_shortfall_bytes}};
    j["gpus_to_fit"] = run.nodes_to_fit ? Json(*run.nodes_to_fit * run.job.cluster.gpus_per_node) : Json(nullptr);
    return j;
  }
  const auto& best = r.best.front();
  Json alts = Json::array();
  for (size_t i = 1; i < r.best.size(); ++i)
    alts.push_back({{"plan", plan::plan_to_json(r.best[i].plan)},
                    {"runnable_on", names(run.runnable_on[i])},
                    {"iteration_time_s", r.best[i].iteration_time_s},
                    {"simulated_time_s", r.best[i].simulated_time_s},
                    {"gap", run.gap(i)}});
  Json j = {{"plan", plan::plan_to_json(best.plan)},
            {"runnable_on", names(run.runnable_on[0])},
            {"prediction", prediction_json(run.best_job(), best.prediction)},
            {"simulated_time_s", best.simulated_time_s},
            {"alternatives", alts},
            {"space", run.space},
            {"stats", stats}};
  if (!run.engines.empty()) {
    Json engines = Json::array();
    for (const auto& e : run.engines) engines.push_back(engine_json(e));
    j["engines"] = engines;
  }
  if (!run.decided_by.empty()) {
    Json terms = Json::array();
    for (const auto& d : run.decided_by)
      terms.push_back({{"term", d.best.name}, {"best_s", d.best.seconds}, {"runner_up_s", d.runner_up.seconds}});
    j["decided_by"] = terms;
  }
  if (run.current) {
    const auto& c = *run.current;
    const double mine = best.prediction.time.iteration_time_s, theirs = c.prediction.time.iteration_time_s;
    j["compare_to"] = {{"plan", plan::plan_to_json(c.plan)},
                       {"fits", c.prediction.memory.fits},
                       {"iteration_time_s", theirs},
                       {"speedup", theirs / mine},
                       {"import_notes", c.import_notes},
                       {"job_differences", differences_json(c.job_differences)},
                       {"job_from", c.job_from_flags ? "flags" : "training_file"}};
  }
  return j;
}

}  // namespace mist::api
