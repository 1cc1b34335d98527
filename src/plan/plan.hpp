// Plan: how one training job is parallelised and which memory optimisations each pipeline stage
// uses. The JSON form is documented in docs/plan-format.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/json_fields.hpp"
#include "core/stated.hpp"
#include "spec/cluster.hpp"
#include "spec/model.hpp"
#include "spec/training.hpp"

namespace mist::plan {

// Fractions (0..1) of each state kept in host memory instead of on the GPU.
struct Offload {
  double weights = 0;
  double gradients = 0;
  double optimizer_states = 0;
  double activations = 0;
  bool operator==(const Offload&) const = default;
};

struct StagePlan {
  int64_t num_layers = 0;   // transformer blocks in this stage
  int zero = 0;             // ZeRO level 0..3 over this stage's data-parallel group
  int64_t ckpt_layers = 0;  // blocks of this stage that recompute fully in backward
  Offload offload;
  // Blocks of each model chunk under interleaving (virtual_pipeline_stages entries, adding up to
  // num_layers) where they differ: Megatron's --account-for-embedding/loss-in-pipeline-split and
  // its layouts give the first (last) stage a shorter first (last) chunk. Empty: num_layers / v each.
  std::vector<int64_t> chunk_layers{};
  bool operator==(const StagePlan&) const = default;
};

enum class Recompute { kNone, kSelective };  // plan-wide; per-stage full recompute is ckpt_layers

// How context parallelism moves keys and values (Megatron-LM's --cp-comm-type):
//   kRing      the engine's K/V ring, overlapped with the attention's steps (Megatron's p2p,
//              Transformer Engine's AttnFuncWithCPAndKVP2P; torchtitan's ring attention, PyTorch's
//              all-gather rotation: the only one torchtitan runs);
//   kAllToAll  q, k and v moved from sequence- to head-sharded before the attention and its output
//              back after it (Megatron's a2a, DeepSpeed-Ulysses' scheme): every rank attends over the
//              whole sequence with a/cp heads, so sliding windows need no ring;
//   kAllGather k and v gathered whole before the kernels and their gradients reduce-scattered after
//              (Megatron's all_gather), neither overlapped;
//   kA2aP2p    both, nested (Megatron's hierarchical a2a+p2p, --hierarchical-context-parallel-sizes
//              a cp/a): an all-to-all over each group of Plan::cp_a2a consecutive CP ranks makes
//              them head-sharded over a·(s/cp) tokens, and those groups run the K/V ring over the
//              cp/a ranks a apart.
enum class CpComm { kRing, kAllToAll, kAllGather, kA2aP2p };
const char* to_string(CpComm c);  // "ring", "a2a", "all_gather", "a2a+p2p" (the plan file's spelling)

// The most interleaved model chunks per stage, and pipeline stages, a plan may have.
inline constexpr int64_t kMaxVirtual = 1024;
inline constexpr int64_t kMaxPp = 100000;

struct Plan {
  int64_t dp = 1, tp = 1, pp = 1;
  // Expert parallelism of a mixture of experts (Megatron-Core's parallel folding): the experts are
  // split over ep ranks, each expert's weights over etp ranks, on the same tp·dp GPUs of a stage as
  // the attention; the expert data-parallel group (expert_dp) holds the remaining copies.
  int64_t ep = 1, etp = 1;
  // Context parallelism (Megatron-Core's --context-parallel-size, torchtitan's
  // context_parallel_degree): each sequence is split over cp ranks in 2·cp load-balanced chunks,
  // and attention exchanges keys and values around the CP ring. dp·tp·pp·cp = GPUs; the gradients
  // are reduced, and ZeRO shards, over the dp·cp ranks that hold the same weights (grad_dp).
  int64_t cp = 1;
  CpComm cp_comm = CpComm::kRing;  // only with cp > 1
  int64_t cp_a2a = 1;  // with cp_comm a2a+p2p: the all-to-all groups' size a (1 < a < cp, a divides cp)
  bool sequence_parallel = false;
  int64_t micro_batch_size = 1;
  int64_t grad_accum_steps = 1;          // micro-batches per iteration per data-parallel rank
  int64_t virtual_pipeline_stages = 1;   // model chunks per pipeline rank (interleaved 1F1B)
  Recompute recompute = Recompute::kNone;
  // Data-parallel communication overlapped with compute (Megatron --overlap-grad-reduce and
  // --overlap-param-gather; PyTorch DDP overlaps gradient all-reduce too).
  bool overlap_grad_reduce = true;
  bool overlap_param_gather = true;
  // false: the plan file left the switch out (this one and those below): `--engine` then gives the
  // engine's own (engines::take_engine_switches).
  Stated overlap_grad_reduce_stated, overlap_param_gather_stated;
  // Tensor-parallel collectives pipelined with the GEMMs that produce/consume them (Megatron
  // --tp-comm-overlap with Transformer Engine userbuffers; needs sequence parallelism).
  bool overlap_tp_comm = false;
  Stated overlap_tp_comm_stated;  // false: the plan file left overlap_tp_comm out
  // The weight-gradient GEMM accumulates into the gradient buffer (Megatron's default
  // --gradient-accumulation-fusion; cuBLAS beta = 1). When false each micro-batch's gradients are
  // added by a separate kernel (Megatron-LM 2021's local DDP, PyTorch's AccumulateGrad, DeepSpeed).
  bool grad_accumulation_fusion = true;
  Stated grad_accumulation_fusion_stated;
  // Backward collectives of column-parallel linears launched asynchronously, each under a GEMM of
  // the same backward: the input re-gather (sequence parallelism) under the input-gradient GEMM,
  // the input gradient's all-reduce / reduce-scatter under the weight-gradient GEMM (Megatron's
  // LinearWithGradAccumulationAndAsyncCommunication, always on since late 2021). False: serial
  // (Megatron-LM 2021, Megatron-DeepSpeed under DeepSpeed, torchtitan without async TP).
  bool async_tp_backward = true;
  Stated async_tp_backward_stated;
  // Mixtures of experts: the dispatcher's all-to-alls of one micro-batch run on a communication
  // stream under the compute of another (Megatron-Core's --overlap-moe-expert-parallel-comm: the
  // 1F1B steady state runs one micro-batch's forward and another's backward together, layer by
  // layer; warm-up and cool-down run alone). Needs ep > 1; one more micro-batch is in flight.
  bool overlap_moe_a2a = false;
  Stated overlap_moe_a2a_stated;
  std::vector<StagePlan> stages;         // pp entries, first to last
  bool operator==(const Plan&) const = default;
};

Result<Plan> load_plan(const std::string& path);
Result<Plan> plan_from_json(const Json& j, const std::string& what);
Json plan_to_json(const Plan& p);

// Cross-checks a plan against the job; the error names the rule that broke, e.g.
// "plan.stages: layers add up to 30 but the model has 32".
Result<void> validate_plan(const Plan& p, const spec::ModelSpec& m, const spec::ClusterSpec& c,
                           const spec::TrainingSpec& t);
// The model's shapes that tensor parallelism splits (heads, key/value heads, FFN and expert widths)
// are divisible by tp; the error names plan.tp.
Result<void> check_tp(const spec::ModelSpec& m, int64_t tp);
// Expert parallelism: ep and etp are 1 for a dense model; for a mixture of experts ep divides the
// expert count, etp the expert width, and ep·etp the tp·cp·dp GPUs of a stage. Errors name plan.ep or
// plan.etp.
// `tp_cp` is tp·cp, the attention's GPUs per data-parallel rank.
Result<void> check_experts(const spec::ModelSpec& m, int64_t tp_cp, int64_t dp, int64_t ep, int64_t etp);
// A mixture of experts' first dense blocks (ModelSpec::first_dense_layers) all sit in the first
// stage's first model chunk (of first_stage_layers / virtual_stages blocks): what mist plans, so
// that every other stage holds MoE blocks only. validate_plan refuses other splits; the tuner
// skips them.
bool holds_dense_blocks(const spec::ModelSpec& m, int64_t first_stage_layers, int64_t virtual_stages);
// The dense blocks stage `stage` holds under that rule (first_dense_layers on stage 0, else 0).
int64_t dense_blocks(const spec::ModelSpec& m, int stage);
// Blocks of each of stage `stage`'s model chunks: its chunk_layers, or num_layers / v each (one
// entry without interleaving). The one home of the chunks' sizes for memory, time and exports.
std::vector<int64_t> stage_chunk_layers(const Plan& p, size_t stage);
// Whether some stage's chunks differ in size.
bool uneven_chunks(const Plan& p);
// The expert data-parallel degree the plan leaves: tp·cp·dp / (ep·etp) (Megatron's
// expert_data_parallel_size: the experts fold over the attention's tp·cp·dp GPUs).
int64_t expert_dp(const Plan& p);
// The ranks that hold the same dense weights: dp·cp. Megatron reduces gradients and shards the
// distributed optimizer over this group (get_data_parallel_group(with_context_parallel=True)),
// torchtitan's FSDP over dp_shard·cp. The one home of the rule for memory, time and the tuner.
int64_t grad_dp(const Plan& p);
// Context parallelism against the job: cp splits each sequence into 2·cp chunks and needs flash
// attention (the engines run the K/V ring inside their fused attention), and a model whose window
// is shorter than the sequence is refused (mist's ring is the causal one); the error names plan.cp.
// (Under sequence parallelism tp must also divide each CP rank's tokens: validate_plan.)
// `comm` and `tp`: the all-to-all needs the heads (and key/value heads) of each TP rank to divide by
// cp (a2a+p2p: by the all-to-all groups' size `a2a`), and a2a alone lifts the sliding-window
// refusal (every rank then attends over the whole sequence); the error names plan.cp, plan.cp_comm
// or plan.cp_a2a.
Result<void> check_cp(const spec::ModelSpec& m, const spec::TrainingSpec& t, int64_t cp,
                      CpComm comm = CpComm::kRing, int64_t tp = 1, int64_t a2a = 1);
// Checks the training settings against the model and the GPU: the GPU supports the precision
// (bf16 needs Ampere or later), and a learned position table has a row for every position of the
// sequence (rotary positions have no table and no limit).
Result<void> validate_training(const spec::ModelSpec& m, const spec::ClusterSpec& c, const spec::TrainingSpec& t);

// The even split of `layers` blocks over `pp` stages: earlier stages take the remainder. The one
// home of the rule (uniform plans, the tuner's uniform split, engines' default splits, published
// runs' "every_stage").
int64_t even_split_layers(int64_t layers, int64_t pp, int64_t stage);
std::vector<int64_t> even_split(int64_t layers, int64_t pp);

// What ZeRO level `zero` over `dp` data-parallel ranks divides each state by (dp or 1): weights
// from ZeRO-3, gradients from ZeRO-2, optimizer states from ZeRO-1 (Rajbhandari et al. 2020). The
// one home of the rule for the memory model, the time model and the tuner.
struct ShardFactors {
  double weights = 1, gradients = 1, optimizer_states = 1;
};
ShardFactors shard_factors(int zero, int64_t dp);

// A plan with layers split as evenly as possible (even_split), the same options on every stage;
// used by examples and tests.
Plan uniform_plan(const spec::ModelSpec& m, int64_t dp, int64_t tp, int64_t pp, int64_t micro_batch,
                  int64_t grad_accum, const StagePlan& every_stage);

const char* to_string(Recompute r);

}  // namespace mist::plan
