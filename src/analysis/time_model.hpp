// Iteration time of a plan: per-layer op times (hardware/perf_model), tensor-parallel and
// data-parallel communication (hardware/comm_model), the overlap of ZeRO collectives and offload
// copies with compute, a stable per-micro-batch time T_i and an extra D_i for the first/last
// micro-batch of each stage, and Mist's closed form for the pipeline (pipeline_time below).
// docs/time-model.md explains each term and records the checks against published runs.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hardware/comm_model.hpp"
#include "hardware/perf_model.hpp"
#include "plan/plan.hpp"
#include "profile/op_source.hpp"
#include "spec/cluster.hpp"
#include "spec/model.hpp"
#include "spec/training.hpp"

namespace mist::analysis {

// Mist's two-stream interference model (reference/mist.md §6.3, compute ∥ GPU-GPU collective):
// the factors of A100-SXM4-40GB as Mist profiled it (a matmul beside an all-gather, NVLink;
// Dazz993/Mist benchmark/mist/configs/experiment/template-a100-sxm4-40gb.yaml at 3895557b,
// interference_model_params[16:18]). Its V100 and L4 profiles give 1.170/1.004 and 1.168/1.000:
// compute loses 17-29% while a collective runs, the collective almost nothing.
struct Interference {
  double compute = 1.2856;
  double collective = 1.0393;
};

// The time of `compute` and `comm` (each as it takes alone) overlapped: both run slowed by their
// factors until the shorter ends, then the rest of the longer runs alone.
double overlap_time(double compute, double comm, const Interference& f);

struct TimeConstants {
  hardware::PerfConstants perf;
  hardware::CommConstants comm;
  // Compute and an NCCL collective overlapped on two streams share SMs and HBM: while both run,
  // compute is `interference.compute` times slower and the collective `interference.collective`
  // times (overlap_time below).
  Interference interference;
  // Megatron's data-parallel gradient buckets (--ddp-bucket-size default: 40M parameters): with
  // overlap, the last bucket's reduction is always exposed.
  double ddp_bucket_params = 40e6;
  // Adam on the CPU for offloaded optimizer states, parameters per second per GPU (estimate).
  double cpu_adam_params_per_s = 1e9;
  // Measured op times to prefer to the analytical model (docs/profile.md); null: analytical only.
  // job::prepare reads a cluster's profile_db into it.
  std::shared_ptr<const profile::OpTable> profile;
};

struct TimeTerm {
  std::string name, description;
  double seconds = 0;
};

struct StageTime {
  int index = 0;
  double stable_s = 0;  // T_i: forward + backward of one micro-batch in the steady state
  double delta_s = 0;   // D_i: extra of the iteration's first and last micro-batch on this stage
  double fwd_s = 0, bwd_s = 0;     // the forward and backward parts of T_i
  double drain_s = 0;              // B_i: backward + its p2p sends, what hides later stages' D
  std::vector<TimeTerm> stable_terms;  // what T_i is made of
  std::vector<TimeTerm> delta_terms;   // what D_i is made of
};

struct TimePrediction {
  std::vector<StageTime> stages;
  double iteration_time_s = 0;
  double pipeline_fill_s = 0;     // Σ T_i (or its interleaved form)
  double steady_s = 0;            // (G - 1)·max T_i
  double exposed_delta_s = 0;     // max_i(D_i - Σ_{j<i} B_j / v), at least 0
  double tokens_per_s = 0;
  double model_flops_per_iteration = 0;  // 3 × forward matmul FLOPs, no recompute
  double model_tflops_per_gpu = 0;
  double mfu = 0;                 // model FLOP/s per GPU over the dense peak of the precision
  profile::SourceCounts op_sources;  // where the op times of the embedding, a block and the head came from
};

// One layer's costs for one micro-batch on one GPU.
struct LayerTimes {
  double fwd = 0, bwd = 0;          // compute
  double fwd_tp = 0, bwd_tp = 0;    // tensor-parallel collectives
  // What the backward collectives add when each overlaps the GEMM it is launched against (the
  // plan's async_tp_backward): the time beyond that GEMM plus the interference while both run.
  double bwd_tp_async = 0;
  // Collectives outside any GEMM (the MoE dispatcher's all-to-alls over the expert-parallel group,
  // its gather and scatter over the expert tensor-parallel group): on the critical path whatever
  // the plan overlaps.
  double fwd_exposed = 0, bwd_exposed = 0;
  // Of the exposed time, what context parallelism's K/V ring adds beyond the attention kernels it
  // runs under (part of fwd_exposed and bwd_exposed).
  double fwd_cp = 0, bwd_cp = 0;
  // Of fwd and bwd, the compute between the first and the last exposed collective: an MoE block's
  // experts, between its dispatch and its combine (what Megatron's all-to-all overlap pairs with
  // the other micro-batch's dispatch; the rest, attention to dispatch and after the combine, pairs
  // with its combine).
  double inner_fwd = 0, inner_bwd = 0;
  double core_fwd = 0;              // what selective recompute redoes: its modules' forward, collectives included
  double params = 0;                // parameters held by one GPU
  double expert_params = 0;         // the expert weights among them (sharded over the expert grid)
  // The FP8 linears' weights among them, and the expert ones among those: one byte each when the
  // job keeps FP8 parameters (StageTimer::fp8_params_), gathered as such.
  double fp8_params = 0, fp8_expert_params = 0;
  double saved = 0;                 // activation bytes kept for backward
  // What the GPU waits for the host in a pass: the stream's kernels in order, each launched
  // host_per_kernel_s after the one before and started when both it is launched and the one
  // before has ended (host_stall): the host runs ahead under long kernels and the GPU idles
  // behind it on short ones. The backward alone, after the recomputed modules (selective), and
  // after the whole forward again (a fully recomputed block). Zero without a host cost.
  double stall_fwd = 0, stall_bwd = 0, stall_bwd_core = 0, stall_bwd_rc = 0;
};

// The time a single stream's kernels of these durations, launched by a host that spends `host`
// seconds on each, take beyond their own sum (0 when the host keeps ahead throughout).
double host_stall(const std::vector<double>& kernels, double host);

// The numbers behind a StageTime, without the labels (the tuner's hot path).
struct StageTimeParts {
  double fwd = 0, bwd = 0, p2p = 0;   // T_i = fwd + bwd + p2p
  double recompute = 0, tp = 0;       // parts of fwd/bwd, for the report
  double grad_sync = 0, param_gather = 0, step = 0, tied_sync = 0;  // D_i = their sum (and a2a_unpaired)
  // With the MoE all-to-alls overlapped (plan.overlap_moe_a2a), bwd holds a block's fwd + bwd as
  // the 1F1B steady state runs them paired; the warm-up forwards and cool-down backwards run
  // unpaired, their all-to-alls exposed: what that costs once per iteration.
  double a2a_unpaired = 0;
  double stable() const { return fwd + bwd + p2p; }
  // B_i: the backward compute and the backward half of the p2p sends. After this stage's last
  // backward, the iteration still waits for the last gradient to cross the earlier stages.
  double drain() const { return bwd + p2p / 2; }
  double delta() const { return grad_sync + param_gather + step + tied_sync + a2a_unpaired; }
};

class PreparedJob;

// Times of the stages of one parallel layout (plan-level fields of `layout`: dp, tp, pp,
// micro-batch, accumulation, interleaving, recompute, overlaps; its `stages` are not read). Built
// once per layout (per-layer op times on the job's shared lowering); then any stage setting costs a
// few operations, which is what the tuner needs.
class StageTimer {
 public:
  static Result<StageTimer> create(const PreparedJob& job, const plan::Plan& layout);
  // Stage `index` (0..pp-1) run with the settings `st`.
  StageTime time(const plan::StagePlan& st, int index) const;
  StageTimeParts parts(const plan::StagePlan& st, int index) const;
  // 3 × forward matmul FLOPs of the whole model for one iteration (no recompute).
  double model_flops_per_iteration() const { return model_flops_; }
  // Compute and TP times of one transformer block, the embedding and the head.
  const LayerTimes& block_times() const { return blk_; }
  const LayerTimes& dense_block_times() const { return dns_; }  // a mixture of experts' first dense blocks
  const LayerTimes& embedding_times() const { return emb_; }
  const LayerTimes& head_times() const { return head_; }
  // Where the op times came from (each op of the three layers once, forward and backward apart).
  const profile::SourceCounts& op_sources() const { return sources_; }

 private:
  StageTimer() = default;
  spec::ClusterSpec cluster_;
  spec::TrainingSpec training_;
  plan::Plan layout_;
  TimeConstants k_;
  hardware::Placement place_;
  LayerTimes blk_, emb_, head_;
  LayerTimes dns_;            // a mixture of experts' first dense blocks (dense_blocks_ of them, on stage 0)
  double dense_blocks_ = 0;
  double tied_params_ = 0;
  bool fp8_params_ = false;  // FP8 parameters (--fp8-param-gather): gathered in one byte
  double p2p_s_ = 0;  // one boundary transfer
  double model_flops_ = 0;
  profile::SourceCounts sources_;
};

// The costs of the block's ops whose names start with `prefix` ("moe." for a mixture of experts'
// MLP from the router on, "attn." for the attention), for one micro-batch of plan `p`, timed as
// StageTimer times the whole block: to set a part of the model against a measurement of it.
Result<LayerTimes> block_op_times(const PreparedJob& job, const plan::Plan& p, std::string_view prefix);

// Bytes the optimizer step streams through HBM per local parameter, as mixed-precision optimizers
// run it (Megatron's Float16Optimizer / DistributedOptimizer, DeepSpeed's, torch.amp + Adam): the
// update, the gradient norm for clipping, and for 16-bit training the copy of 16-bit gradients
// into fp32 main gradients, fp16's unscale and inf/nan check, and the master-to-weights copy.
double optimizer_step_bytes(const spec::TrainingSpec& t);

// Mist's closed form for the pipeline, the one home of the rule:
//   iteration = fill + (G - 1)·max T_i + max_i(D_i - Σ_{j<i} B_j / v)
// with fill = Σ T_i, or max T + (Σ T_i - max T)/v with v interleaved chunks per stage, and B_j the
// backward share of T_j: stage i's last backward ends when the last micro-batch's gradient still
// has to cross stages i-1..0, one chunk each (Mist writes Σ_{j<i} T_j, which the event simulation
// contradicts; docs/time-model.md). `drain` may be empty (all 0: Mist's form without offsets).
struct PipelineTime {
  double fill = 0, steady = 0, exposed_delta = 0;
  double total() const { return fill + steady + exposed_delta; }
};
PipelineTime pipeline_time(const std::vector<double>& stable, const std::vector<double>& delta,
                           const std::vector<double>& drain, int64_t micro_batches, int64_t v = 1);
// The same from the three quantities the tuner carries through its search: Σ T_i, max T_i and
// max_i(D_i - Σ_{j<i} B_j / v) (negative: nothing exposed), allocation-free.
PipelineTime pipeline_time(double sum_t, double max_t, double exposed, double micro_batches, int64_t v = 1);
inline double pipeline_iteration_time(const std::vector<double>& stable, const std::vector<double>& delta,
                                      const std::vector<double>& drain, int64_t micro_batches, int64_t v = 1) {
  return pipeline_time(stable, delta, drain, micro_batches, v).total();
}

// The iteration time of `p`, a plan that predict() (analysis/prediction.hpp) has checked.
Result<TimePrediction> iteration_time(const PreparedJob& job, const plan::Plan& p);

}  // namespace mist::analysis
