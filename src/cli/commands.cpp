#include "cli/commands.hpp"

#include <algorithm>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "analysis/memory_model.hpp"
#include "cli/report.hpp"

namespace mist::cli {

namespace {

struct JobArgs {
  std::string model, cluster, training, plan;
  bool json = false;
};

void add_job_options(CLI::App* cmd, JobArgs& a) {
  cmd->add_option("--model", a.model, "catalog name (mist list models) or a JSON file: a Hugging Face config.json or mist's model form")
      ->required();
  cmd->add_option("--cluster", a.cluster, "cluster JSON file: {\"gpu\": NAME, \"nodes\": N, \"gpus_per_node\": M, ...}")
      ->required();
  cmd->add_option("--training", a.training, "training JSON file: global_batch_size, seq_length, precision, ...")
      ->required();
  cmd->add_option("--plan", a.plan, "plan JSON file: dp, tp, pp, micro_batch_size, grad_accum_steps, stages, ...")
      ->required();
}

Result<Job> load_job(const JobArgs& a) {
  Job job;
  MIST_TRY(job.model, spec::load_model(a.model));
  MIST_TRY(job.cluster, spec::load_cluster(a.cluster));
  MIST_TRY(job.training, spec::load_training(a.training));
  MIST_TRY(job.plan, plan::load_plan(a.plan));
  return job;
}

std::string list_models() {
  std::string out = fmt::format("{:<18} {:>7} {:>7} {:>6} {:>4} {:>7} {:>8} {:>9}  {}\n", "name", "layers", "hidden",
                                "heads", "kv", "ffn", "vocab", "params", "family");
  for (const auto& n : spec::model_catalog_names()) {
    auto m = spec::catalog_model(n);
    if (!m) continue;
    out += fmt::format("{:<18} {:>7} {:>7} {:>6} {:>4} {:>7} {:>8} {:>8.2f}B  {}\n", m->name, m->num_layers,
                       m->hidden_size, m->num_heads, m->num_kv_heads, m->ffn_hidden_size, m->vocab_size,
                       m->num_parameters() / 1e9, m->family);
  }
  return out;
}

// The first clause of a catalog source, for one table line (docs/specs.md has them in full).
std::string short_source(const std::string& source) {
  std::string s = source.substr(0, source.find(';'));
  return s.size() > 70 ? s.substr(0, 67) + "..." : s;
}

std::string list_gpus() {
  std::string out = fmt::format("{:<18} {:>9} {:>10} {:>10} {:>9} {:>10} {:>5}  {}\n", "name", "memory",
                                "bf16 TF/s", "fp32 TF/s", "HBM TB/s", "link GB/s", "PCIe", "source");
  for (const auto& n : spec::gpu_catalog_names()) {
    auto g = spec::catalog_gpu(n);
    if (!g) continue;
    out += fmt::format("{:<18} {:>9} {:>10.1f} {:>10.1f} {:>9.3f} {:>10.0f} {:>5}  {}\n", g->name,
                       format_bytes(g->memory_bytes), g->bf16_flops / 1e12, g->fp32_flops / 1e12, g->mem_bw / 1e12,
                       g->link_bw / 1e9, g->pcie_gen, short_source(g->source));
  }
  return out;
}

}  // namespace

int run(const std::vector<std::string>& args, std::string& out, std::string& err) {
  CLI::App app{
      "mist: plans and predicts distributed LLM training.\n"
      "Predicts the per-GPU memory of every pipeline stage of a plan, term by term."};
  app.name("mist");
  app.require_subcommand(1);
  app.set_version_flag("--version", "mist 0.1.0");

  JobArgs predict_args, explain_args;
  auto* predict = app.add_subcommand("predict", "predict per-stage memory of a plan (and whether it fits)");
  add_job_options(predict, predict_args);
  predict->add_flag("--json", predict_args.json, "print one JSON object instead of a table");
  auto* explain = app.add_subcommand("explain", "show every memory term of every stage: its formula and value");
  add_job_options(explain, explain_args);
  explain->add_flag("--json", explain_args.json, "print the prediction as JSON (same as predict --json)");
  std::string what;
  auto* list = app.add_subcommand("list", "print a built-in catalog");
  list->add_option("catalog", what, "models or gpus")->required()->check(CLI::IsMember({"models", "gpus"}));

  // CLI11 would only say "A subcommand is required" for `mist frobnicate`; name the word instead.
  if (!args.empty() && !args[0].empty() && args[0][0] != '-') {
    std::vector<std::string> names;
    for (const auto* sub : app.get_subcommands([](CLI::App*) { return true; })) names.push_back(sub->get_name());
    if (std::find(names.begin(), names.end(), args[0]) == names.end()) {
      err = fmt::format("mist: unknown command '{}' (commands: {})\nRun 'mist --help' for usage.\n", args[0],
                        join(names));
      return kExitInvalidInput;
    }
  }
  std::vector<std::string> argv = args;
  std::reverse(argv.begin(), argv.end());  // CLI11 parses a reversed vector
  try {
    app.parse(argv);
  } catch (const CLI::CallForHelp&) {
    // `mist predict --help` arrives here too: show the help of the subcommand that was named.
    const auto subs = app.get_subcommands();
    out = subs.empty() ? app.help() : subs.back()->help();
    return kExitOk;
  } catch (const CLI::CallForAllHelp&) {
    out = app.help("", CLI::AppFormatMode::All);
    return kExitOk;
  } catch (const CLI::CallForVersion&) {
    out = "mist 0.1.0\n";
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    err = fmt::format("mist: {}\nRun 'mist --help' (or 'mist <command> --help') for usage.\n", e.what());
    return kExitInvalidInput;
  }

  if (list->parsed()) {
    out = what == "models" ? list_models() : list_gpus();
    return kExitOk;
  }
  const bool is_explain = explain->parsed();
  const JobArgs& a = is_explain ? explain_args : predict_args;
  auto job = load_job(a);
  if (!job) {
    err = "mist: invalid input: " + job.error().to_string() + "\n";
    return kExitInvalidInput;
  }
  auto pred = analysis::predict_memory(job->model, job->cluster, job->training, job->plan);
  if (!pred) {
    err = "mist: invalid input: " + pred.error().to_string() + "\n";
    return kExitInvalidInput;
  }
  if (a.json)
    out = prediction_json(*job, *pred).dump(2) + "\n";
  else
    out = is_explain ? explanation_text(*job, *pred) : prediction_text(*job, *pred);
  return kExitOk;
}

}  // namespace mist::cli
