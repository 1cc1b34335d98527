#include "api/tune.hpp"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "api/prediction_json.hpp"
#include "export/deepspeed.hpp"
#include "export/megatron.hpp"
#include "tuner/nodes_to_fit.hpp"

namespace mist::api {

namespace {

// The user's current configuration (--compare-to): Megatron-LM flags, or a DeepSpeed JSON file
// (with --compare-megatron-flags for its TP/PP). Its training settings replace the job's, so the
// tuned plan answers the same question.
Result<engines::ImportedJob> import_current(const TuneRequest& r, const job::Job& job) {
  const bool is_file = r.compare_to.ends_with(".json");
  if (is_file) return engines::import_deepspeed_file(r.compare_to, r.compare_megatron_flags, job.model, job.cluster);
  if (!r.compare_megatron_flags.empty())
    return fail("--compare-megatron-flags", "goes with a DeepSpeed JSON file in --compare-to");
  return engines::import_megatron_flags(r.compare_to, job.model, job.cluster);
}

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

}  // namespace

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
  run.options.progress = r.progress;
  std::optional<engines::ImportedJob> imported;  // --compare-to
  if (!r.compare_to.empty()) {
    MIST_TRY(imported, import_current(r, job));
    job.training = imported->training.applied_to(job.training);
    MIST_CHECK(plan::validate_plan(imported->plan, job.model, job.cluster, job.training));
  }
  Calibration calibration = r.calibration;
  if (!r.engine.empty() && r.engine != "mist") calibration.engine = r.engine;
  MIST_TRY(auto options, prepare_options(calibration));
  MIST_TRY(auto prepared, job::prepare(job, options));
  auto result = tuner::tune(prepared, run.options);
  if (!result) return std::unexpected(Failure(result.error(), Failure::Kind::kSearch));
  run.result = std::move(*result);
  run.space = run.options.engine ? engines::to_string(*run.options.engine) : r.space;
  if (run.result.best.empty()) {
    MIST_TRY(run.nodes_to_fit, tuner::nodes_to_fit(prepared, run.options));
  } else if (imported) {
    MIST_TRY(auto prediction, analysis::predict(prepared, imported->plan));
    run.current = CurrentConfig{imported->plan, std::move(prediction), imported->notes};
  }
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
                    {"iteration_time_s", r.best[i].iteration_time_s},
                    {"simulated_time_s", r.best[i].simulated_time_s}});
  Json j = {{"plan", plan::plan_to_json(best.plan)},
            {"prediction", prediction_json(run.best_job(), best.prediction)},
            {"simulated_time_s", best.simulated_time_s},
            {"alternatives", alts},
            {"space", run.space},
            {"stats", stats}};
  if (run.current) {
    const auto& c = *run.current;
    const double mine = best.prediction.time.iteration_time_s, theirs = c.prediction.time.iteration_time_s;
    j["compare_to"] = {{"plan", plan::plan_to_json(c.plan)},
                       {"fits", c.prediction.memory.fits},
                       {"iteration_time_s", theirs},
                       {"speedup", theirs / mine},
                       {"import_notes", c.import_notes}};
  }
  return j;
}

}  // namespace mist::api
