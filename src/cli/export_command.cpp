// mist export: a plan as an engine's options; mist import: an engine's options as a plan.
#include <fstream>
#include <memory>

#include <fmt/format.h>

#include "api/export_fallback.hpp"
#include "cli/command.hpp"
#include "cli/commands.hpp"
#include "cli/job.hpp"
#include "cli/plan_text.hpp"
#include "cli/report.hpp"
#include "export/deepspeed.hpp"
#include "export/megatron.hpp"
#include "export/torchtitan.hpp"

namespace mist::cli {

namespace {

struct ExportArgs {
  JobArgs job;
  std::string to;
  std::string out;
};

struct ImportArgs {
  std::string megatron, deepspeed, megatron_flags, torchtitan;
  std::string model, cluster, training, training_out;
};

// The plan offered instead (api::export_fallback): the nearest one and whether it fits, then what is
// printed on stdout, or that nothing the engine runs fits and by how much.
std::string fallback_text(const api::ExportFallback& f, const char* name) {
  std::string out;
  const auto& near = f.nearest;
  if (!near.changes.empty()) {
    out += fmt::format("The nearest plan {} can run ({}):\n", name, plan_compact(near.plan));
    for (const auto& c : near.changes) out += "  " + c + "\n";
    if (f.nearest_fits())
      out += "  it fits in memory, leaving the headroom tune leaves (5%)\n";
    else if (f.nearest_prediction)
      out += fmt::format("  it does NOT fit: {} short on its worst stage{}\n", format_bytes(f.nearest_shortfall_bytes),
                         f.nearest_host_shortfall_bytes > 0
                             ? fmt::format(", {} short of host memory per node", format_bytes(f.nearest_host_shortfall_bytes))
                             : "");
  }
  if (f.offered) {
    const bool nearest = f.offered_is_nearest;
    out += fmt::format("{} (printed on stdout): {}{}\n",
                       nearest ? fmt::format("The nearest plan is the fastest {} runs that fits", name)
                               : fmt::format("The fastest plan {} runs that fits", name),
                       plan_compact(*f.offered),
                       !nearest && f.best ? fmt::format(", {} per iteration", format_seconds(f.best->iteration_time_s))
                                          : "");
    return out;
  }
  if (!f.search_refusal.empty()) return out + fmt::format("No plan {} runs: {}\n", name, f.search_refusal);
  out += fmt::format("No plan {} runs fits in memory", name);
  if (f.closest)
    out += fmt::format(": the closest ({}) needs {} more GPU memory on its worst stage{}", plan_compact(f.closest->plan),
                       format_bytes(f.closest->shortfall_bytes),
                       f.closest->host_shortfall_bytes > 0
                           ? fmt::format(" and {} more host memory per node", format_bytes(f.closest->host_shortfall_bytes))
                           : "");
  return out + "; nothing on stdout. `mist tune` says how many GPUs would give a plan that fits.\n";
}

bool write_file(const std::string& path, const std::string& text, std::string& err) {
  std::ofstream f(path);
  f << text;
  if (f) return true;
  err += fmt::format("mist: cannot write {}\n", path);
  return false;
}

int run_export(const ExportArgs& a, std::string& out, std::string& err) {
  auto job = load_job(a.job);
  if (!job) return invalid_input(err, job.error());
  auto engine = engines::engine_from_string(a.to);
  if (!engine) return invalid_input(err, Error{"--to", engine.error().message});
  engines::ExportOptions opts;
  if (!a.out.empty() && *engine == engines::Engine::kDeepSpeed) opts.deepspeed_config_path = a.out;
  auto r = engines::export_plan(*engine, *job, opts);
  if (!r) return invalid_input(err, r.error());
  const char* name = engines::display_name(*engine);
  if (!r->exported) {
    err += fmt::format("mist: {} cannot run this plan:\n", name);
    for (const auto& e : r->reasons) err += "  " + e.to_string() + "\n";
    auto fallback = api::export_fallback(*job, *engine);
    if (!fallback) return failed(err, fallback.error());
    err += fallback_text(*fallback, name);
    if (fallback->offered) out = plan::plan_to_json(*fallback->offered).dump(2) + "\n";
    return kExitInvalidInput;
  }
  const auto& x = *r->exported;
  // One block to paste: the environment the engine asserts, then its options.
  std::string text = engines::render_environment(x.environment) + engines::render_options(x.options);
  if (*engine == engines::Engine::kDeepSpeed) {
    // The JSON goes to --out (flags on stdout) or to stdout (flags on stderr), so stdout stays one thing.
    const std::string config = x.config.dump(2) + "\n";
    if (!a.out.empty()) {
      if (!write_file(a.out, config, err)) return kExitInvalidInput;
      out = text;
    } else {
      out = config;
      err += "mist: Megatron-DeepSpeed flags for this config (save it as ds_config.json):\n" + text;
    }
  } else if (!a.out.empty()) {
    if (!write_file(a.out, text, err)) return kExitInvalidInput;
  } else {
    out = text;
  }
  for (const auto& n : x.notes) err += "mist: note: " + n + "\n";
  return kExitOk;
}

std::string stated_training(const engines::TrainingOverrides& t) {
  std::vector<std::string> parts;
  if (t.global_batch_size) parts.push_back(fmt::format("global_batch_size {}", *t.global_batch_size));
  if (t.seq_length) parts.push_back(fmt::format("seq_length {}", *t.seq_length));
  if (t.precision) parts.push_back(fmt::format("precision {}", spec::to_string(*t.precision)));
  if (t.optimizer) parts.push_back(fmt::format("optimizer {}", spec::to_string(*t.optimizer)));
  if (t.dropout) parts.push_back(fmt::format("dropout {}", *t.dropout));
  if (t.compile) parts.push_back(fmt::format("compile {}", *t.compile));
  if (t.compile_loss) parts.push_back(fmt::format("compile_loss {}", *t.compile_loss));
  return join(parts);
}

int run_import(const ImportArgs& a, std::string& out, std::string& err) {
  const int sources = int(!a.megatron.empty()) + int(!a.deepspeed.empty()) + int(!a.torchtitan.empty());
  if (sources != 1)
    return invalid_input(err, Error{"--from-megatron",
                                    "give exactly one of --from-megatron, --from-deepspeed and --from-torchtitan"});
  if (!a.megatron_flags.empty() && a.deepspeed.empty())
    return invalid_input(err, Error{"--megatron-flags", "goes with --from-deepspeed"});
  auto model = spec::load_model(a.model);
  if (!model) return invalid_input(err, model.error());
  auto file = spec::load_cluster(a.cluster);
  if (!file) return invalid_input(err, file.error());
  const spec::ClusterSpec* cluster = &file->cluster;
  Result<engines::ImportedJob> imported =
      !a.megatron.empty()  ? engines::import_megatron_flags(a.megatron, *model, *cluster)
      : !a.deepspeed.empty() ? engines::import_deepspeed_file(a.deepspeed, a.megatron_flags, *model, *cluster)
                             : engines::import_torchtitan_overrides(a.torchtitan, *model, *cluster);
  if (!imported) return invalid_input(err, imported.error());
  spec::TrainingSpec base;
  if (!a.training.empty()) {
    auto t = spec::load_training(a.training);
    if (!t) return invalid_input(err, t.error());
    base = *t;
  }
  const spec::TrainingSpec training = imported->training.applied_to(base);
  if (auto ok = plan::validate_plan(imported->plan, *model, *cluster, training); !ok)
    return invalid_input(err, ok.error());
  if (!a.training_out.empty() && !write_file(a.training_out, spec::training_to_json(training).dump(2) + "\n", err))
    return kExitInvalidInput;
  for (const auto& n : imported->notes) err += "mist: note: " + n + "\n";
  if (auto s = stated_training(imported->training); !s.empty())
    err += "mist: the configuration also states training: " + s + "\n";
  out = plan::plan_to_json(imported->plan).dump(2) + "\n";
  return kExitOk;
}

}  // namespace

std::vector<Command> add_export_commands(CLI::App& app) {
  auto ea = std::make_shared<ExportArgs>();
  auto* e = app.add_subcommand("export", "write a plan as Megatron-LM flags, a DeepSpeed config or torchtitan "
                                         "overrides (refused, with the nearest runnable plan, if the engine cannot)");
  add_job_options(e, ea->job);
  e->add_option("--to", ea->to, "megatron, deepspeed or torchtitan")
      ->required()
      ->check(CLI::IsMember({"megatron", "deepspeed", "torchtitan"}));
  e->add_option("--out", ea->out, "write to FILE (deepspeed: the JSON config; its flags go to stdout)");

  auto ia = std::make_shared<ImportArgs>();
  auto* i = app.add_subcommand("import", "read an engine's options as a plan (JSON on stdout) to predict or tune");
  i->add_option("--from-megatron", ia->megatron, "Megatron-LM flags, one quoted string (--from-megatron=\"...\")");
  i->add_option("--from-deepspeed", ia->deepspeed, "DeepSpeed JSON config file");
  i->add_option("--megatron-flags", ia->megatron_flags, "Megatron-DeepSpeed flags launched with the DeepSpeed config");
  i->add_option("--from-torchtitan", ia->torchtitan, "torchtitan --section.field overrides, one quoted string");
  i->add_option("--model", ia->model, "catalog name or model JSON file")->required();
  i->add_option("--cluster", ia->cluster, "cluster JSON file")->required();
  i->add_option("--training", ia->training, "training JSON file; the settings the options state replace its own");
  i->add_option("--training-out", ia->training_out, "write the training settings (stated ones applied) to FILE");
  return {{e, [ea](std::string& out, std::string& err) { return run_export(*ea, out, err); }},
          {i, [ia](std::string& out, std::string& err) { return run_import(*ia, out, err); }}};
}

}  // namespace mist::cli
