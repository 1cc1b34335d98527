#include "export/capability.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "export/common.hpp"
#include "export/splits.hpp"
#include "spec/engine_fields.hpp"

namespace mist::engines {

namespace {

using plan::Offload;
using plan::Plan;
using plan::Recompute;

// Applies an engine's rules in order to a copy of the plan; every rule that changes the plan
// records why (naming the field) and what it changed. Rules only ever move towards the engine's
// space, so a second walk over the result changes nothing.
struct Walk {
  Plan p;
  std::vector<Error> reasons;
  std::vector<std::string> changes;

  void note(std::string path, std::string why, std::string change) {
    changes.push_back(fmt::format("{}: {} ({})", path, change, why));
    reasons.push_back({std::move(path), std::move(why)});
  }
  std::string stage(size_t i, std::string_view field) const { return fmt::format("plan.stages[{}].{}", i, field); }
};

std::string per_stage(const Plan& p, auto get) {
  std::vector<std::string> v;
  for (const auto& s : p.stages) v.push_back(fmt::format("{}", get(s)));
  return fmt::format("{}", fmt::join(v, ", "));
}

int64_t total_layers(const Plan& p) {
  int64_t n = 0;
  for (const auto& s : p.stages) n += s.num_layers;
  return n;
}

// One ZeRO level for all stages: the highest, which needs the least memory.
void one_zero_level(Walk& w, Engine e) {
  int z = 0;
  for (const auto& s : w.p.stages) z = std::max(z, s.zero);
  for (size_t i = 0; i < w.p.stages.size(); ++i)
    if (w.p.stages[i].zero != z) {
      std::string before = per_stage(w.p, [](const plan::StagePlan& s) { return s.zero; });
      for (auto& s : w.p.stages) s.zero = z;
      w.note(w.stage(i, "zero"), fmt::format("{} applies one ZeRO level to every stage", display_name(e)),
             fmt::format("{} -> {} on every stage", before, z));
      return;
    }
}

void set_zero(Walk& w, int z, std::string why) {
  const int before = w.p.stages.empty() ? 0 : w.p.stages[0].zero;
  if (before == z) return;
  for (auto& s : w.p.stages) s.zero = z;
  w.note(w.stage(0, "zero"), std::move(why), fmt::format("{} -> {} on every stage", before, z));
}

// Sets one offload fraction to 0 on every stage where it is not.
void drop_offload(Walk& w, double Offload::*field, std::string_view name, std::string why) {
  for (size_t i = 0; i < w.p.stages.size(); ++i)
    if (w.p.stages[i].offload.*field > 0) {
      std::string before = per_stage(w.p, [&](const plan::StagePlan& s) { return s.offload.*field; });
      for (auto& s : w.p.stages) s.offload.*field = 0;
      w.note(w.stage(i, fmt::format("offload.{}", name)), std::move(why), fmt::format("{} -> 0", before));
      return;
    }
}

// One fraction for all stages: the largest, which needs the least GPU memory.
void one_fraction(Walk& w, double Offload::*field, std::string_view name, std::string why) {
  double f = 0;
  for (const auto& s : w.p.stages) f = std::max(f, s.offload.*field);
  for (size_t i = 0; i < w.p.stages.size(); ++i)
    if (w.p.stages[i].offload.*field != f) {
      std::string before = per_stage(w.p, [&](const plan::StagePlan& s) { return s.offload.*field; });
      for (auto& s : w.p.stages) s.offload.*field = f;
      w.note(w.stage(i, fmt::format("offload.{}", name)), std::move(why),
             fmt::format("{} -> {} on every stage", before, f));
      return;
    }
}

void set_ckpt(Walk& w, const std::vector<int64_t>& want, std::string why) {
  for (size_t i = 0; i < w.p.stages.size(); ++i)
    if (w.p.stages[i].ckpt_layers != want[i]) {
      std::string before = per_stage(w.p, [](const plan::StagePlan& s) { return s.ckpt_layers; });
      for (size_t k = 0; k < want.size(); ++k) w.p.stages[k].ckpt_layers = want[k];
      w.note(w.stage(i, "ckpt_layers"), std::move(why), fmt::format("{} -> {}", before, fmt::join(want, ", ")));
      return;
    }
}

void drop_selective_with_full(Walk& w, std::string why) {
  if (w.p.recompute != Recompute::kSelective) return;
  if (!detail::any_fully_recomputed(w.p)) return;
  w.p.recompute = Recompute::kNone;
  w.note("plan.recompute", std::move(why), "selective -> none (blocks not fully recomputed keep their attention core)");
}

// Every block of every stage recomputed, or none: any recompute becomes full.
void all_or_no_ckpt(Walk& w, std::string why) {
  bool any = false, all = true;
  for (const auto& s : w.p.stages) any |= s.ckpt_layers > 0, all &= s.ckpt_layers == s.num_layers;
  if (!any || all) return;
  std::vector<int64_t> want;
  for (const auto& s : w.p.stages) want.push_back(s.num_layers);
  set_ckpt(w, want, std::move(why));
}

// Moves a plan to a new split, keeping fully recomputed stages fully recomputed.
void set_split(Walk& w, const std::vector<int64_t>& layers, std::string why) {
  std::string before = per_stage(w.p, [](const plan::StagePlan& s) { return s.num_layers; });
  for (size_t i = 0; i < layers.size(); ++i) {
    auto& s = w.p.stages[i];
    const bool full = s.ckpt_layers == s.num_layers;
    s.num_layers = layers[i];
    s.ckpt_layers = full ? s.num_layers : std::min(s.ckpt_layers, s.num_layers);
    s.chunk_layers.clear();  // the engine's own split has chunks of equal size
  }
  w.note("plan.stages", std::move(why), fmt::format("layers per stage {} -> {}", before, fmt::join(layers, ", ")));
}

// Model chunks of unequal size (plan.stages[i].chunk_layers) made equal, for an engine that
// cannot state them; the stage totals stay (the engine's split rules follow).
void even_chunks(Walk& w, std::string why) {
  if (!plan::uneven_chunks(w.p)) return;
  std::string before;
  for (const auto& s : w.p.stages) {
    if (!before.empty()) before += "; ";
    before += fmt::format("{}", fmt::join(s.chunk_layers.empty() ? std::vector<int64_t>{s.num_layers} : s.chunk_layers,
                                          "+"));
  }
  for (auto& s : w.p.stages) s.chunk_layers.clear();
  w.note("plan.stages", std::move(why), fmt::format("blocks per chunk {} -> equal chunks", before));
}

// The plan without interleaving (one model chunk a stage, so no chunk sizes either).
void no_interleaving(Walk& w, std::string why) {
  w.note("plan.virtual_pipeline_stages", std::move(why), fmt::format("{} -> 1", w.p.virtual_pipeline_stages));
  w.p.virtual_pipeline_stages = 1;
  for (auto& s : w.p.stages) s.chunk_layers.clear();
}

bool grads_reduced(const Plan& p) { return plan::grad_dp(p) > 1; }
bool params_gathered(const Plan& p) { return plan::grad_dp(p) > 1 && p.stages[0].zero >= 1; }

// Context parallelism folded into data parallelism (CP the engine cannot run): the cp ranks of each
// sequence become data-parallel ranks, so each holds cp times fewer micro-batches, or smaller ones.
void fold_cp_into_dp(Walk& w, std::string why) {
  const int64_t cp = w.p.cp;
  if (cp == 1) return;
  const int64_t per_rank = w.p.micro_batch_size * w.p.grad_accum_steps;  // sequences per dp rank
  if (per_rank % cp != 0) {  // no whole split: the plan stays, and so does the reason
    w.reasons.push_back({"plan.cp", std::move(why)});
    return;
  }
  const int64_t want = per_rank / cp;
  int64_t b = std::min(w.p.micro_batch_size, want);
  while (want % b != 0) --b;
  const std::string before = fmt::format("cp {} dp {} micro_batch_size {} grad_accum_steps {}", cp, w.p.dp,
                                         w.p.micro_batch_size, w.p.grad_accum_steps);
  w.p.dp *= cp;
  w.p.cp = 1;
  w.p.cp_comm = plan::CpComm::kRing;
  w.p.cp_a2a = 1;
  w.p.micro_batch_size = b;
  w.p.grad_accum_steps = want / b;
  w.note("plan.cp", std::move(why),
         fmt::format("{} -> cp 1 dp {} micro_batch_size {} grad_accum_steps {}", before, w.p.dp,
                     w.p.micro_batch_size, w.p.grad_accum_steps));
}

void set_flag(Walk& w, bool Plan::*field, bool value, std::string path, std::string why) {
  if (w.p.*field == value) return;
  w.p.*field = value;
  w.note(std::move(path), std::move(why), fmt::format("{} -> {}", !value, value));
}

void megatron_rules(Walk& w, const spec::TrainingSpec* t) {
  one_zero_level(w, Engine::kMegatron);
  drop_offload(w, &Offload::weights, "weights", "Megatron-LM has no option to offload weights");
  drop_offload(w, &Offload::gradients, "gradients", "Megatron-LM has no option to offload gradients");
  one_fraction(w, &Offload::optimizer_states, "optimizer_states",
               "Megatron-LM offloads one fraction of the optimizer states on every stage (--optimizer-offload-fraction)");
  if (w.p.stages[0].offload.optimizer_states > 0) {
    if (t && t->optimizer != spec::Optimizer::kAdamW)
      drop_offload(w, &Offload::optimizer_states, "optimizer_states",
                   "Megatron-LM offloads the optimizer only for Adam (--use-precision-aware-optimizer)");
    else if (w.p.stages[0].zero == 0)
      set_zero(w, 1, "optimizer offload runs in the distributed optimizer (--use-distributed-optimizer, ZeRO-1)");
  }
  if (t && t->fp8_param_gather) {
    if (w.p.stages[0].zero == 0)
      set_zero(w, 1, "--fp8-param-gather runs in the distributed optimizer or FSDP (Megatron-LM asserts it)");
    if (w.p.stages[0].offload.optimizer_states > 0 && t->fp8 != spec::Fp8Recipe::kDelayed)
      drop_offload(w, &Offload::optimizer_states, "optimizer_states",
                   "Megatron-LM offloads the optimizer with --fp8-param-gather only under --fp8-recipe delayed");
  }
  if (params_gathered(w.p) && w.p.overlap_param_gather && !w.p.overlap_grad_reduce)
    set_flag(w, &Plan::overlap_param_gather, false, "plan.overlap_param_gather",
             "Megatron-LM overlaps the parameter all-gather only with --overlap-grad-reduce");
  drop_selective_with_full(w, "Megatron-LM recomputes selectively or fully, not both (--recompute-granularity)");
  if (w.p.tp > 1)
    set_flag(w, &Plan::async_tp_backward, true, "plan.async_tp_backward",
             "Megatron-LM always launches the backward collectives of column-parallel linears asynchronously");
  const int64_t n = megatron_recompute_count(w.p);
  set_ckpt(w, megatron_ckpt_layers(w.p, n),
           fmt::format("Megatron-LM recomputes the first N blocks of every model chunk (--recompute-method block "
                       "--recompute-num-layers N); the largest count asked for is N = {}", n));
  // TransformerConfig.__post_init__ (d98e8a64) on --overlap-moe-expert-parallel-comm.
  if (w.p.overlap_moe_a2a) {
    if (const auto why = megatron_moe_overlap_refusal(w.p, t ? t->mtp_layers : 0))
      set_flag(w, &Plan::overlap_moe_a2a, false, "plan.overlap_moe_a2a", "Megatron-LM " + *why);
  }
  const double ao = w.p.stages[0].offload.activations;
  if (std::any_of(w.p.stages.begin(), w.p.stages.end(), [](const auto& s) { return s.offload.activations > 0; })) {
    const bool recompute = w.p.recompute == Recompute::kSelective || w.p.stages[0].ckpt_layers > 0;
    if (w.p.pp > 1) {
      drop_offload(w, &Offload::activations, "activations",
                   "Megatron-LM's activation offloading (--cpu-offloading-num-layers) refuses pipeline parallelism");
    } else if (recompute) {
      drop_offload(w, &Offload::activations, "activations",
                   "Megatron-LM's activation offloading (--cpu-offloading-num-layers) refuses activation recompute");
    } else {
      const int64_t layers = w.p.stages[0].num_layers;
      const int64_t blocks = std::min<int64_t>(static_cast<int64_t>(std::ceil(ao * layers - 1e-9)), layers - 1);
      const double want = blocks > 0 ? static_cast<double>(blocks) / static_cast<double>(layers) : 0.0;
      if (want != ao) {
        w.p.stages[0].offload.activations = want;
        w.note(w.stage(0, "offload.activations"),
               fmt::format("Megatron-LM offloads the activations of whole blocks, fewer than the model's {} "
                           "(--cpu-offloading-num-layers)", layers),
               fmt::format("{} -> {} ({} blocks)", ao, want, blocks));
      }
    }
  }
}

// DeepSpeed-Ulysses, Megatron-DeepSpeed's context parallelism (EngineCaps::cp): q, k, v and the
// output moved between sequence- and head-sharded by all-to-alls, i.e. plan.cp_comm a2a. Where the
// plan's tp or pp, or the model's heads, rule it out, the CP ranks become data-parallel ranks;
// another exchange becomes the all-to-all.
void ulysses_rules(Walk& w, const spec::TrainingSpec* t, const spec::ModelSpec* m) {
  const engines::CpCaps& caps = engine_caps(Engine::kDeepSpeed).cp;
  if (w.p.cp == 1) return;
  if ((!caps.with_tp && w.p.tp > 1) || (!caps.with_pp && w.p.pp > 1))
    return fold_cp_into_dp(w, "Megatron-DeepSpeed's context parallelism, DeepSpeed-Ulysses "
                              "(--ds-sequence-parallel-size), runs without tensor or pipeline parallelism "
                              "(initialize_model_parallel asserts tp = pp = 1)");
  if (m && !caps.grouped_kv && m->num_kv_heads != m->num_heads)
    return fold_cp_into_dp(w, fmt::format("Megatron-DeepSpeed's DeepSpeed-Ulysses attention needs as many key/value "
                                          "heads as heads (ParallelAttention asserts it); {} has {} for {}",
                                          m->name, m->num_kv_heads, m->num_heads));
  if (m && t)
    if (auto ok = plan::check_cp(*m, *t, w.p.cp, caps.nearest, w.p.tp); !ok && ok.error().path == "plan.cp_comm")
      return fold_cp_into_dp(w, "DeepSpeed-Ulysses (--ds-sequence-parallel-size) is the all-to-all over heads: " +
                                    ok.error().message);
  if (!caps.runs(w.p.cp_comm)) {
    w.note("plan.cp_comm",
           "Megatron-DeepSpeed's context parallelism is DeepSpeed-Ulysses (--ds-sequence-parallel-size), an "
           "all-to-all over heads",
           fmt::format("{} -> {}", plan::to_string(w.p.cp_comm), plan::to_string(caps.nearest)));
    w.p.cp_comm = caps.nearest;
    w.p.cp_a2a = 1;
  }
}

void deepspeed_rules(Walk& w, const spec::TrainingSpec* t, const spec::ModelSpec* m) {
  ulysses_rules(w, t, m);
  one_zero_level(w, Engine::kDeepSpeed);
  if (w.p.pp > 1 && w.p.stages[0].zero > 1)
    set_zero(w, 1, "DeepSpeed's pipeline engine runs ZeRO 0 or 1 only");
  if (w.p.virtual_pipeline_stages > 1) no_interleaving(w, "DeepSpeed's pipeline engine has no interleaved schedule");
  if (w.p.pp > 1) {
    auto want = deepspeed_pipe_layers(total_layers(w.p), w.p.pp, t ? t->mixed_precision() : true);
    std::vector<int64_t> have;
    for (const auto& s : w.p.stages) have.push_back(s.num_layers);
    if (!want.empty() && want != have)
      set_split(w, want, "DeepSpeed's pipeline partitions the blocks itself (partition_method 'type:transformer')");
  }
  drop_selective_with_full(w, "Megatron-DeepSpeed recomputes selectively or fully, not both (--recompute-granularity)");
  if (w.p.pp > 1)
    all_or_no_ckpt(w, "with a DeepSpeed pipeline every block is recomputed or none (--checkpoint-activations)");
  const bool whole_weights =
      std::all_of(w.p.stages.begin(), w.p.stages.end(), [](const auto& s) { return s.offload.weights == 1; });
  if (whole_weights && w.p.pp == 1)
    set_zero(w, 3, "DeepSpeed offloads weights only under ZeRO-3 (zero_optimization.offload_param)");
  else
    drop_offload(w, &Offload::weights, "weights",
                 "DeepSpeed offloads all weights or none, under ZeRO-3 without a pipeline (zero_optimization.offload_param)");
  drop_offload(w, &Offload::gradients, "gradients", "DeepSpeed has no option to offload gradients alone");
  one_fraction(w, &Offload::optimizer_states, "optimizer_states",
               "DeepSpeed offloads one fraction of the optimizer states on every stage (zero_optimization.offload_optimizer)");
  const double f = w.p.stages[0].offload.optimizer_states;
  if (f > 0 && w.p.stages[0].zero == 0)
    set_zero(w, 1, "DeepSpeed offloads the optimizer only under ZeRO (zero_optimization.offload_optimizer)");
  if (f > 0 && f < 1 && w.p.stages[0].zero < 3) {
    for (auto& s : w.p.stages) s.offload.optimizer_states = 1;
    w.note(w.stage(0, "offload.optimizer_states"),
           "DeepSpeed offloads a fraction of the optimizer states only under ZeRO-3 (offload_optimizer.ratio)",
           fmt::format("{} -> 1 on every stage", f));
  }
  const int zero = w.p.stages[0].zero;
  if (grads_reduced(w.p) && zero < 2)
    set_flag(w, &Plan::overlap_grad_reduce, false, "plan.overlap_grad_reduce",
             "below ZeRO-2 DeepSpeed reduces gradients after the backward pass (engine.allreduce_gradients); "
             "ZeRO-2/3 overlap it (zero_optimization.overlap_comm)");
  if (params_gathered(w.p))
    set_flag(w, &Plan::overlap_param_gather, zero == 3, "plan.overlap_param_gather",
             zero == 3 ? "under ZeRO-3 DeepSpeed always prefetches parameters during forward"
                       : "under ZeRO-1/2 DeepSpeed gathers the updated parameters inside the optimizer step");
  if (w.p.tp > 1)
    set_flag(w, &Plan::overlap_tp_comm, false, "plan.overlap_tp_comm",
             "Megatron-DeepSpeed has no tensor-parallel communication overlap");
  if (w.p.grad_accum_steps > 1)
    set_flag(w, &Plan::grad_accumulation_fusion, false, "plan.grad_accumulation_fusion",
             "DeepSpeed's engine adds each micro-batch's gradients into its accumulated ones with a separate kernel");
  if (w.p.tp > 1)
    set_flag(w, &Plan::async_tp_backward, false, "plan.async_tp_backward",
             "Megatron-DeepSpeed turns the asynchronous tensor-parallel all-reduce off under --deepspeed");
  drop_offload(w, &Offload::activations, "activations",
               "DeepSpeed offloads only checkpointed block inputs (activation_checkpointing.cpu_checkpointing), "
               "which mist's plan does not describe");
  set_flag(w, &Plan::overlap_moe_a2a, false, "plan.overlap_moe_a2a",
           "Megatron-DeepSpeed has no overlap of the MoE all-to-alls with another micro-batch's compute");
}

void torchtitan_rules(Walk& w, const spec::TrainingSpec* t) {
  one_zero_level(w, Engine::kTorchtitan);
  const engines::CpCaps& cp = engine_caps(Engine::kTorchtitan).cp;
  if (w.p.cp > 1 && !cp.runs(w.p.cp_comm)) {
    w.note("plan.cp_comm", "torchtitan's context parallelism is PyTorch's ring attention (its all-gather rotation) "
                           "only", fmt::format("{} -> {}", plan::to_string(w.p.cp_comm), plan::to_string(cp.nearest)));
    w.p.cp_comm = cp.nearest;
    w.p.cp_a2a = 1;
  }
  const bool pp = torchtitan_fsdp_is_zero1(w.p.pp, w.p.dp * w.p.cp);  // pipeline stages FSDP shards
  if (w.p.cp > 1 && w.p.stages[0].zero == 0)
    set_zero(w, pp ? 1 : 2, "torchtitan applies FSDP whenever context parallelism is on, sharding over dp_shard·cp "
                            "(parallel_dims.fsdp_enabled)");
  if (!pp && w.p.stages[0].zero == 1)
    set_zero(w, 2, "torchtitan's FSDP2 has no optimizer-only sharding; without resharding after forward it "
                   "shards gradients and optimizer states like ZeRO-2");
  if (pp && w.p.stages[0].zero >= 2)
    set_zero(w, 1, "under pipeline parallelism torchtitan's FSDP2 keeps each stage's whole weights and "
                   "accumulates its whole gradients in fp32 until the last micro-batch (the pipeline schedule "
                   "turns FSDP's gradient sync off before then): ZeRO-1");
  bool any = false, whole = true;
  for (const auto& s : w.p.stages) {
    const auto& o = s.offload;
    any |= o.weights > 0 || o.gradients > 0 || o.optimizer_states > 0;
    whole &= o.weights == 1 && o.gradients == 1 && o.optimizer_states == 1;
  }
  if (any && whole && w.p.dp > 1 && w.p.pp == 1) {
    set_zero(w, 3, "torchtitan's CPU offload runs inside FSDP (training.enable_cpu_offload)");
  } else if (any) {
    const std::string why =
        pp ? "torchtitan's CPU offload runs inside FSDP, which under pipeline parallelism keeps each stage's "
             "whole weights and gradients on the GPU"
           : "torchtitan offloads weights, gradients and optimizer states together, all or none, inside FSDP "
             "over dp > 1 (training.enable_cpu_offload)";
    drop_offload(w, &Offload::weights, "weights", why);
    drop_offload(w, &Offload::gradients, "gradients", why);
    drop_offload(w, &Offload::optimizer_states, "optimizer_states", why);
  }
  drop_offload(w, &Offload::activations, "activations", "torchtitan has no activation offloading");
  if (grads_reduced(w.p) && pp && w.p.stages[0].zero >= 1)
    set_flag(w, &Plan::overlap_grad_reduce, false, "plan.overlap_grad_reduce",
             "under pipeline parallelism the schedule reduce-scatters FSDP's gradients after the last micro-batch's "
             "backward (stage.py, run_post_backward), not under it");
  else if (grads_reduced(w.p))
    set_flag(w, &Plan::overlap_grad_reduce, true, "plan.overlap_grad_reduce",
             "torchtitan's DDP and FSDP2 always overlap gradient reduction with backward");
  if (params_gathered(w.p))
    set_flag(w, &Plan::overlap_param_gather, true, "plan.overlap_param_gather",
             "torchtitan's FSDP2 always prefetches parameters during forward");
  if (w.p.grad_accum_steps > 1)
    set_flag(w, &Plan::grad_accumulation_fusion, false, "plan.grad_accumulation_fusion",
             "PyTorch accumulates each micro-batch's gradients with a separate add (AccumulateGrad)");
  if (w.p.overlap_tp_comm && t && !t->compile)
    set_flag(w, &Plan::overlap_tp_comm, false, "plan.overlap_tp_comm",
             "torchtitan's async TP runs inside torch.compile (compile.enable_async_tensor_parallel needs "
             "compile.enable), and training.compile is false");
  if (w.p.tp > 1)
    set_flag(w, &Plan::async_tp_backward, false, "plan.async_tp_backward",
             "torchtitan's tensor-parallel backward collectives are synchronous (only async TP, overlap_tp_comm, "
             "overlaps them)");
  even_chunks(w, "torchtitan gives every model chunk of a rank the same number of blocks (its generated split)");
  if (w.p.pp > 1) {
    std::vector<int64_t> have;
    for (const auto& s : w.p.stages) have.push_back(s.num_layers);
    if (!torchtitan_split(have, w.p.virtual_pipeline_stages)) {
      auto want = torchtitan_nearest_layers(have, w.p.virtual_pipeline_stages);
      if (!want) {
        no_interleaving(w, "torchtitan's generated split cannot give every rank that many equal model chunks");
        want = torchtitan_nearest_layers(have, 1);
      }
      if (want && *want != have)
        set_split(w, *want, "torchtitan generates the split from first/last stage weights "
                            "(parallelism.pipeline_parallel_first/last_stage_less_layers)");
    }
  }
  set_flag(w, &Plan::overlap_moe_a2a, false, "plan.overlap_moe_a2a",
           "torchtitan b5bcd76c runs the MoE all-to-alls in line with the compute");
  all_or_no_ckpt(w, "torchtitan's full activation checkpointing wraps every block (activation-checkpoint:full)");
  drop_selective_with_full(w, "torchtitan runs one activation-checkpoint mode, full or selective, not both");
}

Walk walk(const Plan& p, Engine e, const spec::TrainingSpec* t, const spec::ModelSpec* m) {
  Walk w{p, {}, {}};
  if (w.p.stages.empty()) return w;
  switch (e) {
    case Engine::kMegatron: megatron_rules(w, t); break;
    case Engine::kDeepSpeed: deepspeed_rules(w, t, m); break;
    case Engine::kTorchtitan: torchtitan_rules(w, t); break;
  }
  return w;
}

}  // namespace

Plan canonical(const Plan& p) {
  Plan c = p;
  if (plan::grad_dp(c) == 1) c.overlap_grad_reduce = true;
  if (plan::grad_dp(c) == 1 || std::all_of(c.stages.begin(), c.stages.end(), [](const auto& s) { return s.zero == 0; }))
    c.overlap_param_gather = true;
  if (c.tp == 1) c.overlap_tp_comm = false;
  if (c.tp == 1) c.async_tp_backward = true;
  if (c.ep == 1) c.overlap_moe_a2a = false;
  return c;
}

std::optional<std::string> megatron_moe_overlap_refusal(const Plan& p, int64_t mtp_layers) {
  if (p.pp > 1 && p.virtual_pipeline_stages < 2)
    return "overlaps the MoE all-to-alls with pp > 1 only in the interleaved schedule (it asserts a virtual "
           "pipeline size)";
  if (detail::any_fully_recomputed(p)) return "refuses the MoE all-to-all overlap with full recompute";
  if (mtp_layers > 1) return "overlaps the MoE all-to-alls with at most one multi-token prediction layer";
  return std::nullopt;
}

namespace {

// Blocks of stage `i` that --recompute-num-layers n recomputes: the first n of each model chunk.
int64_t recomputed_blocks(const Plan& p, size_t i, int64_t n) {
  int64_t out = 0;
  for (int64_t c : plan::stage_chunk_layers(p, i)) out += std::min(n, c);
  return out;
}

}  // namespace

int64_t megatron_recompute_count(const Plan& p) {
  int64_t n = 0;
  for (size_t i = 0; i < p.stages.size(); ++i) {
    // The least count that covers the stage's recomputed blocks (chunks may differ in size).
    int64_t lo = 0, hi = p.stages[i].ckpt_layers;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (recomputed_blocks(p, i, mid) >= p.stages[i].ckpt_layers) hi = mid;
      else lo = mid + 1;
    }
    n = std::max(n, lo);
  }
  return n;
}

std::vector<int64_t> megatron_ckpt_layers(const Plan& p, int64_t n) {
  std::vector<int64_t> out;
  for (size_t i = 0; i < p.stages.size(); ++i) out.push_back(recomputed_blocks(p, i, n));
  return out;
}

std::vector<Error> inexpressible_reasons(const Plan& p, Engine e, const spec::TrainingSpec* t,
                                         const spec::ModelSpec* m) {
  auto reasons = walk(p, e, t, m).reasons;
  if (e == Engine::kTorchtitan && t && t->precision == spec::Dtype::kFp16)
    reasons.push_back({"training.precision", "torchtitan trains in bf16 or fp32 (training.mixed_precision_param), "
                                             "not fp16"});
  // Fields another engine runs (one home with the prediction's refusals); the recompute modules
  // only matter to a plan that recomputes selectively.
  if (t)
    for (auto& r : spec::engine_training_refusals(*t, e, p.recompute == Recompute::kSelective))
      reasons.push_back(std::move(r));
  if (t && t->cross_entropy_fusion == spec::CrossEntropyFusion::kTe && e == Engine::kMegatron)
    reasons.push_back({"training.cross_entropy_fusion",
                       "Megatron-LM d98e8a64 refuses --cross-entropy-fusion-impl te on its command line (arguments.py:1697, "
                       "stability); Megatron-Bridge's configs run it; use \"native\" to export"});
  if (t && t->fp8_training()) {
    using spec::Fp8Recipe;
    if (e == Engine::kDeepSpeed)
      reasons.push_back({"training.precision", "Megatron-DeepSpeed has no FP8 training that mist models (no "
                                               "Transformer Engine linears); use bf16"});
    if (e == Engine::kMegatron && t->fp8 == Fp8Recipe::kRowwise)
      reasons.push_back({"training.fp8_recipe", "Transformer Engine's recipes are tensorwise, delayed, blockwise and "
                                                "mxfp8 (--fp8-recipe); rowwise is torchao's"});
    if (e == Engine::kTorchtitan && t->fp8 != Fp8Recipe::kRowwise)
      reasons.push_back({"training.fp8_recipe", "torchtitan b5bcd76c's Float8LinearConverter has the rowwise "
                                                "recipes only (recipe_name rowwise, rowwise_with_gw_hp)"});
  }
  return reasons;
}

bool expressible(const Plan& p, Engine e, std::vector<Error>* why, const spec::TrainingSpec* t,
                 const spec::ModelSpec* m) {
  auto reasons = inexpressible_reasons(p, e, t, m);
  const bool ok = reasons.empty();
  if (why) *why = std::move(reasons);
  return ok;
}

std::vector<std::string> take_engine_switches(Plan& p, Engine e, const spec::TrainingSpec* t,
                                              const spec::ModelSpec* m) {
  const Walk w = walk(p, e, t, m);
  std::vector<std::string> out;
  auto take = [&](bool Plan::*field, bool stated, std::string_view name) {
    if (stated || p.*field == w.p.*field) return;
    p.*field = w.p.*field;
    const std::string path = fmt::format("plan.{}:", name);
    for (const auto& c : w.changes)
      if (c.starts_with(path)) out.push_back(c);
  };
  take(&Plan::overlap_grad_reduce, p.overlap_grad_reduce_stated.value, "overlap_grad_reduce");
  take(&Plan::overlap_param_gather, p.overlap_param_gather_stated.value, "overlap_param_gather");
  take(&Plan::grad_accumulation_fusion, p.grad_accumulation_fusion_stated.value, "grad_accumulation_fusion");
  take(&Plan::async_tp_backward, p.async_tp_backward_stated.value, "async_tp_backward");
  take(&Plan::overlap_tp_comm, p.overlap_tp_comm_stated.value, "overlap_tp_comm");
  take(&Plan::overlap_moe_a2a, p.overlap_moe_a2a_stated.value, "overlap_moe_a2a");
  return out;
}

Nearest nearest_expressible(const Plan& p, Engine e, const spec::TrainingSpec* t, const spec::ModelSpec* m) {
  auto w = walk(p, e, t, m);
  return {std::move(w.p), std::move(w.changes)};
}

}  // namespace mist::engines
