#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <memory>

#include <fmt/format.h>

#include "cli/command.hpp"
#include "cli/commands.hpp"
#include "cli/job.hpp"
#include "cli/report.hpp"
#include "export/deepspeed.hpp"
#include "job/prepare.hpp"
#include "export/megatron.hpp"
#include "tuner/nodes_to_fit.hpp"
#include "tuner/tuner.hpp"

namespace mist::cli {

namespace {

struct TuneArgs {
  JobArgs job;
  CalibrationArgs calibration;  // its engine is the --engine below
  std::string space = "mist", out_file, engine, solver = "dp", compare_to, compare_megatron_flags, virtual_stages;
  bool exhaustive = false, json = false, no_rerank = false, no_offload = false;
  int top = 5;
  double milp_time_limit = 10;
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

// The user's current configuration (--compare-to): Megatron-LM flags, or a DeepSpeed JSON file
// (with --compare-megatron-flags for its TP/PP). Its training settings replace the job's, so the
// tuned plan answers the same question.
Result<engines::ImportedJob> import_current(const TuneArgs& a, const Job& job) {
  const bool is_file = a.compare_to.ends_with(".json");
  if (is_file) return engines::import_deepspeed_file(a.compare_to, a.compare_megatron_flags, job.model, job.cluster);
  if (!a.compare_megatron_flags.empty())
    return fail("--compare-megatron-flags", "goes with a DeepSpeed JSON file in --compare-to");
  return engines::import_megatron_flags(a.compare_to, job.model, job.cluster);
}

// "1,2,4": interleaved chunks per stage to try.
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

Result<tuner::TuneOptions> tune_options(const TuneArgs& a) {
  tuner::TuneOptions o;
  if (!a.engine.empty() && a.engine != "mist") {
    if (a.space != "mist") return fail("--engine", "give --engine or --space, not both");
    MIST_TRY(auto e, engines::engine_from_string(a.engine));
    o.engine = e;
    o.space = tuner::engine_space(e);
  } else {
    MIST_TRY(o.space, tuner::named_space(a.space));
  }
  if (!a.virtual_stages.empty()) {
    MIST_TRY(o.space.virtual_stages, parse_virtual_stages(a.virtual_stages));
  }
  if (a.no_offload) o.space.weight_offload = o.space.grad_offload = o.space.opt_offload = o.space.act_offload = {0};
  if (a.solver == "milp")
    o.solver = tuner::InterStageSolver::kMilp;
  else if (a.solver != "dp")
    return fail("--solver", "must be dp or milp; got \"" + a.solver + "\"");
  if (!(a.milp_time_limit > 0)) return fail("--milp-time-limit", "must be > 0 seconds");
  o.milp_time_limit_s = a.milp_time_limit;
  o.exhaustive = a.exhaustive;
  o.top = a.top;
  o.rerank_by_simulation = !a.no_rerank;
  if (isatty(STDERR_FILENO)) o.progress = progress_bar;
  return o;
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

int tune(const TuneArgs& a, std::string& out, std::string& err) {
  JobArgs ja = a.job;
  ja.plan.clear();
  auto job = load_job(ja);
  if (!job) return invalid_input(err, job.error());
  auto o = tune_options(a);
  if (!o) return invalid_input(err, o.error());
  std::optional<Job> current;  // --compare-to
  std::vector<std::string> import_notes;
  if (!a.compare_to.empty()) {
    auto imported = import_current(a, *job);
    if (!imported) return invalid_input(err, imported.error());
    job->training = imported->training.applied_to(job->training);
    current = *job;
    current->plan = imported->plan;
    import_notes = imported->notes;
    if (auto ok = plan::validate_plan(current->plan, job->model, job->cluster, job->training); !ok)
      return invalid_input(err, ok.error());
  }
  CalibrationArgs calibration = a.calibration;
  if (!a.engine.empty() && a.engine != "mist") calibration.engine = a.engine;
  auto options = prepare_options(calibration);
  if (!options) return invalid_input(err, options.error());
  auto prepared = job::prepare(*job, *options);
  if (!prepared) return invalid_input(err, prepared.error());
  auto r = tuner::tune(*prepared, *o);
  if (!r) {
    err = "mist: " + r.error().to_string() + "\n";
    return kExitInvalidInput;
  }
  const std::string space_name = o->engine ? engines::to_string(*o->engine) : a.space;
  Json stats = stats_json(r->stats);
  if (r->best.empty()) {
    // Nothing fits: say so, with the closest plan and what it lacks.
    std::string what = "no plan fits";
    Json j = {{"fits", false}, {"space", space_name}, {"stats", stats}};
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
    auto more = tuner::nodes_to_fit(*prepared, *o);
    if (!more) return invalid_input(err, more.error());
    const auto per_node = job->cluster.gpus_per_node;
    j["gpus_to_fit"] = *more ? Json(**more * per_node) : Json(nullptr);
    what += *more ? fmt::format("; on {} GPUs ({} nodes of {}) a plan fits", **more * per_node, **more, per_node)
                  : fmt::format("; not even on {} GPUs", 16 * job->cluster.nodes * per_node);
    if (a.json) out = j.dump(2) + "\n";
    err = "mist: " + what + ". Add GPUs, use GPUs with more memory, or shorten the sequence.\n";
    return kExitNoFit;
  }
  Job best = *job;
  best.plan = r->best.front().plan;
  const Prediction* pred = &r->best.front().prediction;  // what `mist predict` says of it
  if (!a.out_file.empty()) {
    std::ofstream f(a.out_file);
    f << plan::plan_to_json(best.plan).dump(2) << "\n";
    if (!f) {
      err = "mist: cannot write --out " + a.out_file + "\n";
      return kExitInvalidInput;
    }
  }
  // The user's configuration, predicted like the tuned plan.
  Json compare;
  std::string compare_text;
  if (current) {
    auto cp = analysis::predict(*prepared, current->plan);
    if (!cp) return invalid_input(err, cp.error());
    const double mine = pred->time.iteration_time_s, theirs = cp->time.iteration_time_s;
    compare = {{"plan", plan::plan_to_json(current->plan)},
               {"fits", cp->memory.fits},
               {"iteration_time_s", theirs},
               {"speedup", theirs / mine},
               {"import_notes", import_notes}};
    compare_text = fmt::format("your configuration ({}): {} per iteration{}; mist's plan: {} — {:.2f}x {}\n",
                               layout(current->plan), format_seconds(theirs),
                               cp->memory.fits ? "" : " but it does not fit in memory", format_seconds(mine),
                               theirs / mine, theirs >= mine ? "faster" : "(yours is faster: please report this)");
  }
  if (a.json) {
    Json alts = Json::array();
    for (size_t i = 1; i < r->best.size(); ++i)
      alts.push_back({{"plan", plan::plan_to_json(r->best[i].plan)},
                      {"iteration_time_s", r->best[i].iteration_time_s},
                      {"simulated_time_s", r->best[i].simulated_time_s}});
    Json j = {{"plan", plan::plan_to_json(best.plan)},
              {"prediction", prediction_json(best, *pred)},
              {"simulated_time_s", r->best.front().simulated_time_s},
              {"alternatives", alts},
              {"space", space_name},
              {"stats", stats}};
    if (current) j["compare_to"] = compare;
    out = j.dump(2) + "\n";
    return kExitOk;
  }
  out = fmt::format("{:>3} {:>12} {:>12} {:>12} {:>7} {:>11}  {}\n", "#", "iteration", "simulated", "tokens/s", "MFU",
                    "peak mem", "plan");
  for (size_t i = 0; i < r->best.size(); ++i) {
    const auto& cnd = r->best[i];
    const double tps = static_cast<double>(job->training.global_batch_size * job->training.seq_length) / cnd.iteration_time_s;
    out += fmt::format("{:>3} {:>12} {:>12} {:>12.0f} {:>6.1f}% {:>11}  {}\n", i + 1, format_seconds(cnd.iteration_time_s),
                       cnd.simulated_time_s > 0 ? format_seconds(cnd.simulated_time_s) : "-", tps,
                       100 * pred->time.mfu * r->best[0].iteration_time_s / cnd.iteration_time_s,
                       format_bytes(cnd.peak_memory_bytes), layout(cnd.plan));
  }
  out += fmt::format("searched {} layouts ({} skipped by their lower bound), {} stage settings ({} fit, {} timed) in "
                     "{:.2f} s ({} space{})\n\n",
                     r->stats.layouts, r->stats.layouts_pruned, r->stats.stage_settings_evaluated,
                     r->stats.stage_settings_feasible, r->stats.stage_settings_timed, r->stats.seconds, space_name,
                     o->solver == tuner::InterStageSolver::kMilp ? ", MILP" : "");
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
  t->add_option("--space", a->space, "search space: mist (everything), megatron or deepspeed (their usual knobs)")
      ->capture_default_str();
  t->add_option("--engine", a->engine,
                "only plans this engine can run: megatron, deepspeed, torchtitan, or mist (everything); it also "
                "selects the time model's calibration for that stack (megatron's for mist)");
  add_calibration_options(t, a->calibration, /*with_engine=*/false);
  add_headroom_option(t, a->calibration);
  t->add_option("--virtual-stages", a->virtual_stages,
                 "interleaved model chunks per pipeline stage to try, e.g. 1,2,4 (default: the space's; mist: 1,2,4)");
  t->add_option("--solver", a->solver, "inter-stage solver: dp (exact dynamic programme) or milp (Mist's MILP on CBC)")
      ->capture_default_str();
  t->add_option("--milp-time-limit", a->milp_time_limit, "seconds per layout for --solver milp")->capture_default_str();
  t->add_option("--compare-to", a->compare_to,
                "your current configuration: Megatron-LM flags (one quoted string) or a DeepSpeed JSON file; "
                "prints the speedup of mist's plan over it");
  t->add_option("--compare-megatron-flags", a->compare_megatron_flags,
                "Megatron-DeepSpeed flags (TP/PP) that go with a DeepSpeed JSON in --compare-to");
  t->add_flag("--no-offload", a->no_offload,
              "keep every state on the GPU: no weights, gradients, optimizer states or activations in host memory");
  t->add_flag("--no-rerank", a->no_rerank, "order the top plans by the closed form only, not by the event simulation");
  t->add_flag("--exhaustive", a->exhaustive, "enumerate every plan without decomposition (small jobs; the oracle)");
  t->add_option("--top", a->top, "plans to list")->check(CLI::Range(1, 100))->capture_default_str();
  t->add_option("--out", a->out_file, "write the best plan (plan JSON) to this file");
  t->add_flag("--json", a->json, "print {plan, prediction, alternatives, stats} as JSON");
  return {{t, [a](std::string& out, std::string& err) { return tune(*a, out, err); }}};
}

}  // namespace mist::cli
