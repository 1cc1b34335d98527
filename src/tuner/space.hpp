// The search space of `mist tune`: which parallel layouts and which per-stage memory
// optimisations are tried. Every dimension can be switched off (for ablations and for the
// baselines, which are restrictions of the same space).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "export/engine.hpp"
#include "plan/plan.hpp"
#include "spec/cluster.hpp"
#include "spec/model.hpp"
#include "spec/training.hpp"

namespace mist::tuner {

// Which layer splits a search with one setting for every stage (uniform_stage_settings) tries;
// engine_splits() enumerates them.
enum class SplitRule {
  kEven,                // as evenly as possible, the first L mod pp stages one block more
  kMegatronFirstLast,   // the even split, and equal middle stages with the first and last stage each
                        // within round(L/pp) ± layer_slack (Megatron-LM's --decoder-first/last-
                        // pipeline-num-layers)
  kDeepSpeedPartition,  // the one split DeepSpeed's PipelineModule makes with partition_method
                        // 'type:transformer', which Megatron-DeepSpeed's GPTModelPipe hard-codes
  kTorchtitanGenerated, // the splits torchtitan generates from its first/last "less layers"
                        // weights, each 0..layer_slack + 1 (its default 1, 1 first)
};

struct SearchSpace {
  std::string name = "mist";
  std::vector<int64_t> tp = {1, 2, 4, 8};           // tensor-parallel degrees (within an NVLink domain)
  std::vector<int64_t> micro_batch = {1, 2, 4, 8};  // micro-batch sizes
  std::vector<plan::Recompute> recompute = {plan::Recompute::kNone, plan::Recompute::kSelective};
  int64_t max_pp = 64;                               // pipeline stages (divisors of the GPU count)
  // Mixtures of experts: expert-parallel degrees tried (every divisor of the expert count that the
  // stage's tp·dp GPUs hold) and expert tensor parallelism 1 or tp; off: ep 1, etp = tp (Megatron's
  // defaults).
  bool tune_experts = true;
  // Mixtures of experts with ep > 1 and the all-to-all dispatcher: each layout also with its
  // all-to-alls overlapped with another micro-batch's compute (plan.overlap_moe_a2a; it holds one
  // more micro-batch in flight). An engine that cannot run it gets its nearest plan without.
  std::vector<bool> moe_a2a_overlap = {false, true};
  // Context-parallel degrees tried where the job allows them (plan::check_cp), each leaving every
  // CP rank at least min_cp_tokens of the sequence: below that a rank's attention is too short to
  // hide its K/V exchange, and the activations that CP divides are small (a search bound, stated
  // in docs/tuner.md, not a rule of the engines).
  std::vector<int64_t> cp = {1, 2, 4, 8, 16, 32};
  int64_t min_cp_tokens = 4096;
  // The K/V exchanges tried at each cp > 1, each as its own layout: those plan::check_cp allows
  // there (a2a: cp divides each TP rank's heads and key/value heads; ring and all_gather: no
  // sliding window). An engine's space takes its EngineCaps::cp: the exchanges it runs, and whether
  // cp > 1 may go with tp > 1, pp > 1 or grouped key/value heads (DeepSpeed-Ulysses: none of them).
  std::vector<plan::CpComm> cp_comm = {plan::CpComm::kRing, plan::CpComm::kAllToAll, plan::CpComm::kAllGather,
                                       plan::CpComm::kA2aP2p};
  bool cp_with_tp = true, cp_with_pp = true, cp_with_grouped_kv = true;
  // Interleaved 1F1B: model chunks per stage (v > 1 needs pp > 1, layers divisible by pp·v and
  // micro-batches divisible by pp, as Megatron-LM; each stage holds whole chunks).
  std::vector<int64_t> virtual_stages = {1, 2, 4};
  std::vector<int> zero = {0, 1, 2, 3};             // ZeRO levels per stage (when dp > 1)
  bool tune_ckpt = true;                             // recomputed blocks per stage: any 0..l
  bool ckpt_all_or_nothing = false;                 // only c = 0 or c = l (DeepSpeed's knob)
  std::vector<double> weight_offload = {0, 0.25, 0.5, 0.75, 1};
  std::vector<double> grad_offload = {0, 0.25, 0.5, 0.75, 1};
  std::vector<double> opt_offload = {0, 0.25, 0.5, 0.75, 1};
  std::vector<double> act_offload = {0, 0.25, 0.5, 0.75, 1};  // each offload list ascending
  bool weight_offload_needs_zero3 = false;           // DeepSpeed offloads parameters only under ZeRO-3
  bool uniform_stage_settings = false;  // every stage uses the same zero/ckpt/offload (Megatron)
  bool uniform_split = false;           // layers split as evenly as possible
  SplitRule split_rule = SplitRule::kEven;  // splits of a uniform_stage_settings search
  // ZeRO levels tried with pp == 1 and with pp > 1 (DeepSpeed's pipeline: 0 and 1; torchtitan: 0,
  // 2, 3 alone, 0 and 1 under PP).
  std::array<bool, 4> zero_alone = {true, true, true, true};
  std::array<bool, 4> zero_with_pp = {true, true, true, true};
  int layer_slack = 2;                  // stage layer counts within round(L/pp) ± slack (as Mist)
  int pareto_points = 30;               // (T, D) points kept per stage position and layer count
};

// `mist`: everything; `megatron`: DP/TP/PP/CP, uniform split, one recompute count for all stages,
// distributed optimizer on/off, micro-batch (the sweep a Megatron-LM user does by hand);
// `deepspeed`: data parallel (and DeepSpeed-Ulysses' sequence parallel) only, ZeRO 0..3 with
// optimizer (and, under ZeRO-3, parameter) offload and all-or-nothing checkpointing.
Result<SearchSpace> named_space(const std::string& name);

// What an engine can run, as a space to search (`mist tune --engine`): one setting for every stage,
// the engine's splits (SplitRule), ZeRO levels, offload and recompute forms. The tuner also checks
// each plan with the engine's capability model (export/capability.hpp) and moves it to the
// nearest plan the engine can run.
SearchSpace engine_space(engines::Engine e);

// Context-parallel degrees of `space` for a job on `gpus` GPUs per pipeline stage at tp and pp
// (dividing gpus / tp; some exchange of cp_exchanges allowed and, at tp > 1, tp dividing each rank's
// tokens).
std::vector<int64_t> cp_degrees(const SearchSpace& space, const spec::ModelSpec& m, const spec::TrainingSpec& t,
                                int64_t gpus, int64_t tp, int64_t pp = 1);
// The exchanges of space.cp_comm that plan::check_cp allows at (cp, tp), in the space's order; ring
// alone at cp = 1 (where it means nothing). a2a+p2p only with all-to-all groups of `a2a` ranks,
// 1 < a2a < cp.
std::vector<plan::CpComm> cp_exchanges(const SearchSpace& space, const spec::ModelSpec& m, const spec::TrainingSpec& t,
                                       int64_t cp, int64_t tp, int64_t a2a = 1);
// The all-to-all groups the search gives a2a+p2p: the CP ranks an NVLink domain holds (cp ranks tp apart), so
// that the all-to-alls stay on NVLink and the ring alone crosses the network.
int64_t hierarchical_a2a_size(const spec::ClusterSpec& c, int64_t tp, int64_t cp);
// Parallel layouts to try: dp·tp·pp·cp = GPUs (cp of cp_degrees, each with every exchange of
// cp_exchanges), tp within an NVLink domain and dividing heads, kv heads and FFN, pp ≤ layers, micro-batch·dp
// dividing the global batch; for a mixture of experts, each (ep, etp) of expert_degrees.
std::vector<std::pair<int64_t, int64_t>> expert_degrees(const SearchSpace& space, const spec::ModelSpec& m,
                                                        int64_t tp, int64_t cp, int64_t dp);
std::vector<plan::Plan> layouts(const SearchSpace& space, const spec::ModelSpec& m, const spec::ClusterSpec& c,
                                const spec::TrainingSpec& t);

// Per-stage settings to try for a stage of `layers` blocks under data-parallel degree `dp` and
// `pp` pipeline stages.
std::vector<plan::StagePlan> stage_settings(const SearchSpace& space, int64_t layers, int64_t dp, int64_t pp = 1);

// The pieces stage_settings combines, for searches that walk the grid themselves: ZeRO levels
// that apply under `dp` and `pp` (zero_alone, zero_with_pp), recomputed-block counts (ascending), and the
// pairing rules of weight and gradient offload.
std::vector<int> zero_choices(const SearchSpace& space, int64_t dp, int64_t pp = 1);
std::vector<int64_t> ckpt_choices(const SearchSpace& space, int64_t layers);
bool offload_allowed(const SearchSpace& space, int zero, double weights, double gradients);

}  // namespace mist::tuner
