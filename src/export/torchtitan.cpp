#include "export/torchtitan.hpp"

#include <array>

#include <fmt/format.h>

#include "export/capability.hpp"
#include "export/common.hpp"
#include "export/splits.hpp"
#include "export/torchtitan_models.hpp"

namespace mist::engines {

namespace {

using detail::add;

// torchtitan @ b5bcd76c: torchtitan/config/configs.py (ParallelismConfig, TrainingConfig), all in
// the frozen list of tests/unit_tests/test_no_new_cli_options.py; "no_" negates a switch
// (docs/debugging.md).
constexpr std::array<FlagSpec, 29> kFlags{{
    {"--module", true},  // read before tyro by config/manager.py ConfigManager
    {"--config", true},
    {"--parallelism.data_parallel_replicate_degree", true},
    {"--parallelism.data_parallel_shard_degree", true},
    {"--parallelism.fsdp_reshard_after_forward", true},
    {"--parallelism.tensor_parallel_degree", true},
    {"--parallelism.enable_sequence_parallel", false},
    {"--parallelism.no_enable_sequence_parallel", false},
    {"--parallelism.pipeline_parallel_degree", true},
    {"--parallelism.pipeline_parallel_schedule", true},
    {"--parallelism.pipeline_parallel_layers_per_stage", true},
    {"--parallelism.pipeline_parallel_first_stage_less_layers", true},
    {"--parallelism.pipeline_parallel_last_stage_less_layers", true},
    {"--parallelism.num_pp_microbatches", true},
    {"--parallelism.context_parallel_degree", true},
    {"--parallelism.context_parallel_load_balancer", true},
    {"--parallelism.expert_parallel_degree", true},
    {"--parallelism.module_fqns_per_model_part", true},
    {"--training.num_tokens_per_microbatch_per_dp_rank", true},
    {"--training.num_tokens_per_train_step", true},
    {"--training.max_context_length", true},
    {"--training.mixed_precision_param", true},
    {"--training.dtype", true},
    {"--training.enable_cpu_offload", false},
    {"--training.no_enable_cpu_offload", false},
    {"--training.disable_cuda_graphs", false},
    {"--compile.enable", false},
    {"--compile.enable_async_tensor_parallel", false},
    {"--compile.components", true, true},
}};

// distributed/activation_checkpoint.py: ActivationCheckpointingConfig's tyro subcommands.
constexpr std::array<std::string_view, 4> kSubcommands{"activation-checkpoint:none", "activation-checkpoint:full",
                                                       "activation-checkpoint:selective",
                                                       "activation-checkpoint:memory-budget"};

// Defaults of the dataclasses at the commit (configs.py).
constexpr int64_t kDefaultTokensPerMicrobatch = 16384;
constexpr int64_t kDefaultContextLength = 2048;
constexpr int64_t kMaxCount = int64_t{1} << 50;

bool looped_schedule(std::string_view s) {
  return s == "Interleaved1F1B" || s == "LoopedBFS" || s == "InterleavedZeroBubble";
}

}  // namespace

std::span<const FlagSpec> torchtitan_flag_specs() { return kFlags; }
std::span<const std::string_view> torchtitan_subcommands() { return kSubcommands; }

std::vector<Option> torchtitan_options(const spec::ModelSpec& m, const spec::TrainingSpec& t, const plan::Plan& p) {
  std::vector<Option> o;
  if (auto model = torchtitan_model(m)) {
    add(o, "--module", std::string(model->module));
    add(o, "--config", std::string(model->config));
  } else if (auto missing = torchtitan_missing_model(m); missing.config) {
    add(o, "--module", std::string("llama3"));
    add(o, "--config", *missing.config);  // the function the note asks the user to add
  }
  const int zero = p.stages.front().zero;
  add(o, "--parallelism.data_parallel_replicate_degree", zero == 0 ? p.dp : int64_t{1});
  add(o, "--parallelism.data_parallel_shard_degree", zero == 0 ? int64_t{1} : p.dp);
  // ZeRO-1 is FSDP under pipeline parallelism without resharding (capability.cpp, torchtitan_rules).
  if (zero >= 1) add(o, "--parallelism.fsdp_reshard_after_forward", std::string(zero == 3 ? "always" : "never"));
  add(o, "--parallelism.tensor_parallel_degree", p.tp);
  add(o, p.sequence_parallel ? "--parallelism.enable_sequence_parallel" : "--parallelism.no_enable_sequence_parallel");
  add(o, "--parallelism.pipeline_parallel_degree", p.pp);
  // CP's head-tail load balancer (the default) is the 2·cp chunk pairing mist models; FSDP then
  // shards over dp_shard·cp.
  if (p.cp > 1) add(o, "--parallelism.context_parallel_degree", p.cp);
  if (p.pp > 1) {
    const int64_t v = p.virtual_pipeline_stages;
    const auto split = torchtitan_split(detail::stage_layers(p), v).value_or(TorchtitanSplit{});
    add(o, "--parallelism.pipeline_parallel_schedule", std::string(v > 1 ? "Interleaved1F1B" : "1F1B"));
    if (split.layers_per_stage) add(o, "--parallelism.pipeline_parallel_layers_per_stage", *split.layers_per_stage);
    add(o, "--parallelism.pipeline_parallel_first_stage_less_layers", split.first_less);
    add(o, "--parallelism.pipeline_parallel_last_stage_less_layers", split.last_less);
    add(o, "--parallelism.num_pp_microbatches", p.grad_accum_steps);  // one pipeline pass per iteration
    // Trainer.Config._validate_cuda_graphs (trainer.py:168-176): CUDA graphs, on by default, refuse PP.
    add(o, "--training.disable_cuda_graphs");
  }
  const int64_t s = t.seq_length;
  add(o, "--training.num_tokens_per_microbatch_per_dp_rank", p.micro_batch_size * s);
  add(o, "--training.num_tokens_per_train_step", p.micro_batch_size * p.dp * p.grad_accum_steps * s);
  add(o, "--training.max_context_length", s);
  add(o, "--training.mixed_precision_param",
      std::string(t.precision == spec::Dtype::kFp32 ? "float32" : "bfloat16"));
  if (p.stages.front().offload.weights > 0) add(o, "--training.enable_cpu_offload");
  // CompileConfig.components defaults to the model and the loss; an eager loss names the model alone
  // (before the flags that end its list: the subcommand below would read as one more component).
  if (t.compile && !t.compiled_loss()) add(o, "--compile.components", std::vector<std::string>{"model"});
  if (t.compile) add(o, "--compile.enable");
  if (p.overlap_tp_comm && p.tp > 1) add(o, "--compile.enable_async_tensor_parallel");  // needs compile (rules)
  add(o, p.stages.front().ckpt_layers > 0              ? "activation-checkpoint:full"
         : p.recompute == plan::Recompute::kSelective ? "activation-checkpoint:selective"
                                                      : "activation-checkpoint:none");
  return o;
}

std::vector<std::string> torchtitan_notes(const spec::ModelSpec& m, const spec::TrainingSpec& t, const plan::Plan& p) {
  std::vector<std::string> notes;
  if (auto model = torchtitan_model(m))
    notes.push_back(fmt::format("--module {} --config {}: torchtitan's config for this shape (flavor {}); the "
                                "overrides replace its parallelism, batch and checkpointing",
                                model->module, model->config, model->flavor));
  else
    notes.push_back(torchtitan_missing_model(m).note);
  if (p.pp > 1)
    notes.push_back("--training.disable_cuda_graphs: torchtitan captures forward and backward in a CUDA graph by "
                    "default and refuses that with pipeline parallelism");
  notes.push_back("torchtitan batches by tokens: micro batch = num_tokens_per_microbatch_per_dp_rank / "
                  "max_context_length");
  if (t.fp8_training())
    notes.push_back("float8: torchtitan b5bcd76c turns it on in the config function, not by an override: add "
                    "converters=[Float8LinearConverter.Config(recipe_name=\"rowwise\", filter_fqns=[\"output\"])] "
                    "to the Trainer.Config that --config names (torchtitan/components/quantization/float8.py)");
  return notes;
}

Result<ImportedJob> import_torchtitan_overrides(std::string_view text, const spec::ModelSpec& m,
                                                const spec::ClusterSpec& c) {
  MIST_TRY(auto tokens, split_command_line(text, "--from-torchtitan"));
  std::optional<std::string> ac;
  for (auto& tok : tokens) {
    if (tok.starts_with("--"))  // tyro takes hyphens and underscores alike
      for (size_t i = 2; i < tok.size() && tok[i] != '='; ++i)
        if (tok[i] == '-') tok[i] = '_';
    if (tok.starts_with("activation-checkpoint:") || tok.starts_with("activation_checkpoint:"))
      ac = tok.substr(tok.find(':') + 1);
  }
  MIST_TRY(Flags f, Flags::parse_tokens(tokens, kFlags));
  ImportedJob out;
  plan::Plan& p = out.plan;
  const int64_t layers = m.num_layers;
  if (auto config = f.string("--config")) {
    // The config builds the model; the plan is for `m`, so the two must be the same shape.
    if (auto known = torchtitan_config(*config); known && torchtitan_model(m) != known)
      return fail("--config", fmt::format("{} builds torchtitan's llama3 {} ({} layers, hidden {}), not {} ({} layers, "
                                          "hidden {})", *config, known->flavor, known->num_layers, known->hidden_size,
                                          m.name, m.num_layers, m.hidden_size));
  }
  MIST_TRY(auto cp, f.integer("--parallelism.context_parallel_degree", 1, 1024));
  p.cp = cp.value_or(1);
  if (p.cp > 1) {
    if (auto lb = f.string("--parallelism.context_parallel_load_balancer"); lb && *lb != "headtail")
      return fail("--parallelism.context_parallel_load_balancer",
                  fmt::format("is \"{}\": mist models the head-tail chunk pairing only (the default)", *lb));
  }
  if (f.has("--parallelism.module_fqns_per_model_part"))
    return fail("--parallelism.module_fqns_per_model_part", "mist reads torchtitan's generated split only");
  MIST_TRY(auto tp, f.integer("--parallelism.tensor_parallel_degree", 1, 1024));
  MIST_TRY(auto pp, f.integer("--parallelism.pipeline_parallel_degree", 1, 100000));
  MIST_TRY(auto replicate, f.integer("--parallelism.data_parallel_replicate_degree", 1, 1 << 20));
  MIST_TRY(auto shard, f.integer("--parallelism.data_parallel_shard_degree", -1, 1 << 20));
  p.tp = tp.value_or(1);
  p.pp = pp.value_or(1);
  const int64_t r = replicate.value_or(1);
  int64_t s = shard.value_or(-1);
  if (s == 0) return fail("--parallelism.data_parallel_shard_degree", "must be -1 (the rest) or at least 1");
  MIST_TRY(int64_t rest, detail::data_parallel(p.tp * r, p.pp, c, "--parallelism.data_parallel_replicate_degree",
                                                      "--parallelism.pipeline_parallel_degree"));
  if (rest % p.cp != 0)
    return fail("--parallelism.context_parallel_degree",
                fmt::format("{} does not divide the {} GPUs left by replicate × tp × pp", p.cp, rest));
  rest /= p.cp;
  if (s == -1) s = rest;
  if (s != rest)
    return fail("--parallelism.data_parallel_shard_degree",
                fmt::format("replicate × shard × tp × pp × cp = {} but the cluster has {} GPUs",
                            r * s * p.tp * p.pp * p.cp, c.num_gpus()));
  // FSDP shards over dp_shard·cp, and is on whenever that is above 1 (parallel_dims.fsdp_enabled).
  const int64_t shard_group = s * p.cp;
  if (r > 1 && shard_group > 1)
    return fail("--parallelism.data_parallel_replicate_degree",
                "HSDP (replicate above 1 with sharding over dp_shard·cp) shards over part of the data-parallel "
                "ranks only; mist's ZeRO shards over all of dp·cp");
  p.dp = r * s;
  p.sequence_parallel = !f.has("--parallelism.no_enable_sequence_parallel");

  MIST_TRY(auto policy, f.choice("--parallelism.fsdp_reshard_after_forward", {"default", "always", "never"}));
  const std::string reshard = policy.value_or("default");
  int zero = 0;
  if (shard_group > 1) zero = reshard == "always" ? 3 : reshard == "never" ? 2 : (p.pp > 1 ? 2 : 3);  // fsdp.py
  else if (r == 1) zero = reshard == "always" ? 3 : reshard == "never" ? 2 : 0;
  if (zero >= 2 && torchtitan_fsdp_is_zero1(p.pp, shard_group)) {
    if (reshard == "always")
      out.notes.push_back("--parallelism.fsdp_reshard_after_forward always under pipeline parallelism: read as "
                          "ZeRO-1 (the pipeline schedule keeps the whole gradients until the last micro-batch); "
                          "the weights' re-gathers after each forward are not modelled");
    zero = 1;
  }

  // Batch by tokens.
  MIST_TRY(auto context, f.integer("--training.max_context_length", 1, int64_t{1} << 30));
  MIST_TRY(auto per_mb, f.integer("--training.num_tokens_per_microbatch_per_dp_rank", 1, kMaxCount));
  MIST_TRY(auto per_step, f.integer("--training.num_tokens_per_train_step", -1, kMaxCount));
  MIST_TRY(auto microbatches, f.integer("--parallelism.num_pp_microbatches", 1, 1'000'000'000));
  const int64_t seq = context.value_or(kDefaultContextLength);
  const int64_t tokens_mb = per_mb.value_or(kDefaultTokensPerMicrobatch);
  if (tokens_mb % seq != 0)
    return fail("--training.num_tokens_per_microbatch_per_dp_rank",
                fmt::format("{} tokens is not a whole number of {}-token sequences", tokens_mb, seq));
  p.micro_batch_size = tokens_mb / seq;
  const int64_t n_mb = p.pp > 1 ? microbatches.value_or(1) : 1;
  MIST_TRY(int64_t per_rank, detail::product(tokens_mb, n_mb, "--parallelism.num_pp_microbatches"));
  MIST_TRY(const int64_t pass, detail::product(per_rank, p.dp, "--training.num_tokens_per_microbatch_per_dp_rank"));
  const int64_t step = per_step.value_or(-1) < 0 ? pass : *per_step;
  if (step % pass != 0)
    return fail("--training.num_tokens_per_train_step",
                fmt::format("{} is not a multiple of the {} tokens of one accumulation step", step, pass));
  p.grad_accum_steps = n_mb * (step / pass);
  out.training.seq_length = seq;
  out.training.global_batch_size = p.micro_batch_size * p.dp * p.grad_accum_steps;

  // Pipeline split.
  std::vector<int64_t> split{layers};
  if (p.pp > 1) {
    MIST_TRY(auto sched, f.choice("--parallelism.pipeline_parallel_schedule",
                                  {"1F1B", "GPipe", "Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble",
                                   "ZBVZeroBubble", "DualPipeV"}));
    const std::string schedule = sched.value_or("1F1B");
    if (schedule == "ZBVZeroBubble" || schedule == "DualPipeV")
      return fail("--parallelism.pipeline_parallel_schedule", "V-shaped stage placement is not in mist's plans");
    TorchtitanSplit ts;
    MIST_TRY(auto lps, f.integer("--parallelism.pipeline_parallel_layers_per_stage", 1, kMaxCount));
    MIST_TRY(auto first, f.integer("--parallelism.pipeline_parallel_first_stage_less_layers", 0, kMaxCount));
    MIST_TRY(auto last, f.integer("--parallelism.pipeline_parallel_last_stage_less_layers", 0, kMaxCount));
    ts.layers_per_stage = lps;
    ts.first_less = first.value_or(1);
    ts.last_less = last.value_or(1);
    const int64_t stages = torchtitan_num_stages(layers, p.pp, looped_schedule(schedule), ts);
    if (stages % p.pp != 0 || (!looped_schedule(schedule) && stages != p.pp))
      return fail("--parallelism.pipeline_parallel_layers_per_stage",
                  fmt::format("gives {} stages, which the {} schedule cannot place on {} ranks", stages, schedule, p.pp));
    split = torchtitan_rank_layers(torchtitan_stage_layers(layers, stages, ts.first_less, ts.last_less), p.pp);
    if (split.empty())
      return fail("--parallelism.pipeline_parallel_first_stage_less_layers",
                  "torchtitan's generated split gives empty stages or unequal chunks on a rank for these weights");
    p.virtual_pipeline_stages = stages / p.pp;
  }
  p.stages = detail::plan_with_stages(split).stages;
  for (auto& st : p.stages) st.zero = zero;

  const std::string policy_ac = ac.value_or("selective");
  if (policy_ac == "full") {
    for (auto& st : p.stages) st.ckpt_layers = st.num_layers;
  } else if (policy_ac == "selective") {
    p.recompute = plan::Recompute::kSelective;  // its op-level policy, as mist models it for torchtitan
  } else if (policy_ac != "none") {
    out.notes.push_back(fmt::format("activation-checkpoint:{}{}: torchtitan's {} checkpointing has no mist "
                                    "equivalent; read as no recompute", policy_ac, ac ? "" : " (the default)",
                                    policy_ac));
  }
  if (f.has("--training.enable_cpu_offload")) {
    if (zero != 3 || p.dp == 1)
      return fail("--training.enable_cpu_offload", "mist reads CPU offload inside FSDP (ZeRO-3, dp > 1) only");
    for (auto& st : p.stages) st.offload = {.weights = 1, .gradients = 1, .optimizer_states = 1, .activations = 0};
  }
  MIST_TRY(auto mp, f.choice("--training.mixed_precision_param", {"bfloat16", "float32"}));
  out.training.precision = mp.value_or("bfloat16") == "float32" ? spec::Dtype::kFp32 : spec::Dtype::kBf16;
  MIST_TRY(auto dtype, f.choice("--training.dtype", {"bfloat16", "float32"}));
  if (dtype == "bfloat16")
    out.notes.push_back("--training.dtype bfloat16 keeps weights and optimizer states in bf16; mist models mixed "
                        "precision with fp32 master weights");
  // DDP and FSDP2 overlap gradient reduction, except FSDP under PP, whose reduce-scatters the
  // schedule issues after the last micro-batch's backward; FSDP2 prefetches parameters (fsdp.py).
  p.overlap_grad_reduce = !(zero >= 1 && torchtitan_fsdp_is_zero1(p.pp, shard_group));
  p.overlap_param_gather = true;
  p.overlap_tp_comm = f.has("--compile.enable_async_tensor_parallel");
  if (f.has("--compile.enable")) out.training.compile = true;
  else if (p.overlap_tp_comm)
    return fail("--compile.enable_async_tensor_parallel", "needs --compile.enable (async TP runs in the compiled model)");
  if (out.training.compile) out.training.compile_loss = true;  // CompileConfig.components' default
  if (const auto components = f.words("--compile.components")) {
    bool model = false, loss = false;
    for (const auto& c : *components) {
      if (c == "model") model = true;
      else if (c == "loss") loss = true;
      else if (c.find(':') != std::string::npos)
        return fail("--compile.components", fmt::format("lists \"{}\": a subcommand after the list reads as one more "
                                                        "component; put it before the list", c));
      else return fail("--compile.components", fmt::format("lists \"{}\": torchtitan compiles \"model\" and \"loss\"", c));
    }
    // Compiled alone, the loss would leave eager blocks under a compiled loss, which mist does not model.
    if (out.training.compile && !model)
      return fail("--compile.components", "leaves the model out: mist models torch.compile of the model's blocks, "
                                          "with or without the loss");
    if (out.training.compile) out.training.compile_loss = loss;
  }
  if (auto note = detail::ignored_note(f)) out.notes.push_back(*note);
  p.grad_accumulation_fusion = p.grad_accum_steps == 1;  // PyTorch's AccumulateGrad adds them separately
  p.async_tp_backward = false;                           // DTensor's backward collectives are synchronous
  p = canonical(p);
  return out;
}

}  // namespace mist::engines
