// Whether an engine can execute a plan, why not, and the nearest plan it can.
//
// The nearest plan changes as few fields as it can and, where the engine leaves a choice, the
// choice that needs no more GPU memory (one ZeRO level for all stages: the highest; one recompute
// count: the largest). Where the engine has no such knob at all (fractional weight offload in
// Megatron-LM, activation offload in DeepSpeed) the field drops to 0 and the change says so.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "export/engine.hpp"
#include "plan/plan.hpp"
#include "spec/model.hpp"
#include "spec/training.hpp"

namespace mist::engines {

struct Nearest {
  plan::Plan plan;
  std::vector<std::string> changes;  // "plan.stages[1].zero: 1 -> 2 (...)", one per change
};

// torchtitan's FSDP under pipeline parallelism (pp > 1 with an FSDP shard group of dp_shard·cp > 1):
// torch.distributed.pipelining runs every micro-batch's backward without FSDP's gradient sync or
// resharding (stage.py backward_maybe_with_nosync) and torchtitan does not reshard after forward
// (fsdp.py, the default policy): each rank keeps its stage's whole weights and its whole gradients
// in fp32 until the last micro-batch reduce-scatters them, ZeRO-1's memory and traffic, the
// reduction not overlapped with backward. The one home of the rule: the capability rules and the
// torchtitan importer read it.
inline bool torchtitan_fsdp_is_zero1(int64_t pp, int64_t shard_group) { return pp > 1 && shard_group > 1; }

// Why engine `e` cannot run `p`; empty when it can. Each error names the plan field at fault
// (or training.* for what no plan can change, e.g. fp16 on torchtitan). `t`, when given, adds the
// checks that depend on the training setup (precision, optimizer, mixed precision); `m`, those
// that depend on the model's shape (DeepSpeed-Ulysses' heads: EngineCaps::cp).
std::vector<Error> inexpressible_reasons(const plan::Plan& p, Engine e, const spec::TrainingSpec* t = nullptr,
                                         const spec::ModelSpec* m = nullptr);

bool expressible(const plan::Plan& p, Engine e, std::vector<Error>* why = nullptr,
                 const spec::TrainingSpec* t = nullptr, const spec::ModelSpec* m = nullptr);

// The closest plan `e` can run (see the top of this file). Training-level reasons cannot be
// fixed by a plan and stay in inexpressible_reasons. nearest(nearest(p)) == nearest(p).
Nearest nearest_expressible(const plan::Plan& p, Engine e, const spec::TrainingSpec* t = nullptr,
                            const spec::ModelSpec* m = nullptr);

// The plan-level switches engine `e` fixes (the data-parallel overlaps, gradient-accumulation
// fusion, the asynchronous TP backward, TP overlap), applied to those `p`'s file left unstated
// (plan::Plan's *_stated): what the engine runs for them, as its rules above say. Returns one
// line per switch changed, naming the field, the change and the engine's reason.
std::vector<std::string> take_engine_switches(plan::Plan& p, Engine e, const spec::TrainingSpec* t = nullptr,
                                              const spec::ModelSpec* m = nullptr);

// `p` with the fields that have no effect set to mist's defaults: overlap_grad_reduce without data
// parallelism (true), overlap_param_gather without ZeRO or data parallelism (true),
// overlap_tp_comm without tensor parallelism (false). Engine options cannot state them, so an
// import gives these back: import(export(p)) == canonical(p).
plan::Plan canonical(const plan::Plan& p);

// Megatron's --recompute-num-layers for a plan (the first N blocks of every model chunk are
// recomputed; a chunk shorter than N, all of it) and the per-stage counts a given N gives.
int64_t megatron_recompute_count(const plan::Plan& p);
// Why Megatron-LM refuses the plan's MoE all-to-all overlap (--overlap-moe-expert-parallel-comm,
// TransformerConfig.__post_init__ at d98e8a64) with this pipeline, recompute and `mtp_layers`; none
// when it runs it. The capability rules turn the overlap off with it, the importer refuses the flag.
std::optional<std::string> megatron_moe_overlap_refusal(const plan::Plan& p, int64_t mtp_layers);
std::vector<int64_t> megatron_ckpt_layers(const plan::Plan& p, int64_t n);

}  // namespace mist::engines
