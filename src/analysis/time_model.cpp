#include "analysis/time_model.hpp"

#include <algorithm>
#include <numeric>

#include "analysis/memory_model.hpp"
#include "analysis/prepared_job.hpp"
#include "graph/liveness.hpp"
#include "graph/lower.hpp"
#include "hardware/op_cost.hpp"

namespace mist::analysis {

namespace {

using hardware::Collective;

// `acts`: the layer's saved activations, as the job's memory model computed them once.
LayerTimes layer_times(const graph::Layer& L, const graph::LayerActivations& acts, const sym::Bindings& at,
                       const spec::ClusterSpec& c, spec::Dtype d, const hardware::Placement& place, bool selective,
                       const TimeConstants& k, const profile::OpTable* table, profile::SourceCounts& sources,
                       std::string_view only = {}) {
  LayerTimes r;
  // The stream's kernels per pass, an op's in a group of its own (the backward runs the groups in
  // reverse): for the host's stalls.
  const bool host_cost = k.perf.host_per_kernel_s > 0;
  bool meets_other_ranks = false;  // a collective on the layer's stream
  std::vector<double> fwd_kernels_list, core_kernels_list;
  std::vector<std::vector<double>> bwd_groups;
  auto add = [](std::vector<double>& to, double count, double seconds) {
    for (int i = 0; i < static_cast<int>(count); ++i) to.push_back(seconds / count);
  };
  const std::string shape = table ? profile::shape_key(L.kind, at) : std::string();
  // Compute since the last exposed collective, and the inner share once another one closes it.
  double since_exposed_fwd = 0, since_exposed_bwd = 0;
  bool after_exposed = false;
  for (const auto& op : L.ops) {
    if (!op.name.starts_with(only)) continue;
    const auto resolved = profile::resolve_op(table, c.gpu, d, op, shape, at, k.perf);
    const auto& t = resolved.time;
    if (op.kind != graph::OpKind::kView) sources.add(resolved.fwd);
    if (resolved.has_bwd) sources.add(resolved.bwd);
    r.fwd += t.fwd;
    r.bwd += t.bwd;
    if (op.selective_recompute) r.core_fwd += t.fwd;
    auto comm = [&](const graph::TpComm& cm) {
      if (cm.kind == graph::CommKind::kNone) return 0.0;
      const auto kind = cm.kind == graph::CommKind::kAllReduce       ? Collective::kAllReduce
                        : cm.kind == graph::CommKind::kAllGather     ? Collective::kAllGather
                        : cm.kind == graph::CommKind::kReduceScatter ? Collective::kReduceScatter
                        : cm.kind == graph::CommKind::kRingExchange  ? Collective::kRingExchange
                                                                     : Collective::kAllToAll;
      const hardware::Group& g = cm.group == graph::CommGroup::kExpert       ? place.ep
                                 : cm.group == graph::CommGroup::kExpertTp   ? place.etp
                                 : cm.group == graph::CommGroup::kExpertTpEp ? place.tp_ep
                                 : cm.group == graph::CommGroup::kContext    ? place.cp
                                 : cm.group == graph::CommGroup::kContextA2a ? place.cp_a2a
                                 : cm.group == graph::CommGroup::kContextRing ? place.cp_ring
                                                                             : place.tp;
      if (g.size > 1) meets_other_ranks = true;
      return hardware::collective_time(c, kind, g, sym::evaluate_or_zero(cm.bytes, at), k.comm);
    };
    if (!op.fwd_cp.empty() || !op.bwd_cp.empty()) {
      // Context parallelism's K/V exchanges run under their share of the op's own kernels (the
      // ring: each of the first cp − 1 steps' kernels hides the next block's exchange); what an
      // exchange takes beyond its share, and the interference while both run, is exposed. A ring
      // adds a kernel and a send/recv per step for the host to issue, any other collective one.
      const double cp = std::max(1.0, at.at("cp"));
      auto exposed = [&](double kernel, const std::vector<graph::HiddenComm>& xs, double& kernels) {
        double sum = 0;
        for (const auto& x : xs) {
          const double g = kernel * sym::evaluate_or_zero(x.under, at), c = comm(x.comm);
          sum += overlap_time(g, c, k.interference) - g;
          // a2a+p2p's ring runs over its cp / cp_a2a groups.
          const double steps = x.comm.group == graph::CommGroup::kContextRing
                                   ? static_cast<double>(place.cp_ring.size) : cp;
          kernels += x.comm.kind == graph::CommKind::kRingExchange ? 2 * (steps - 1) : 1;
        }
        return sum;
      };
      double fwd_launches = 0, bwd_launches = 0;
      const double f = exposed(t.fwd, op.fwd_cp, fwd_launches), b = exposed(t.bwd, op.bwd_cp, bwd_launches);
      if (host_cost) {
        // The exchanges' launches, then what they expose.
        add(fwd_kernels_list, fwd_launches, 0), fwd_kernels_list.push_back(f);
        if (op.selective_recompute) add(core_kernels_list, fwd_launches, 0), core_kernels_list.push_back(f);
        bwd_groups.emplace_back();
        add(bwd_groups.back(), bwd_launches, 0), bwd_groups.back().push_back(b);
      }
      r.fwd_exposed += f;
      r.bwd_exposed += b;
      r.fwd_cp += f;
      r.bwd_cp += b;
      if (op.selective_recompute) r.core_fwd += f;
    }
    if (op.exposed_comm) {
      const double fc = comm(op.fwd_comm), bc = comm(op.bwd_comm);
      r.fwd_exposed += fc;
      r.bwd_exposed += bc;
      if (host_cost) {
        fwd_kernels_list.push_back(fc);
        if (op.selective_recompute) core_kernels_list.push_back(fc);
        bwd_groups.push_back({bc});
      }
      // A recomputed module's collectives run again with it (Megatron's "moe").
      if (op.selective_recompute) r.core_fwd += fc;
      if (after_exposed) r.inner_fwd += since_exposed_fwd, r.inner_bwd += since_exposed_bwd;
      after_exposed = true;
      since_exposed_fwd = since_exposed_bwd = 0;
      continue;  // no kernel of its own
    }
    since_exposed_fwd += t.fwd;
    since_exposed_bwd += t.bwd;
    const double fwd_tp = comm(op.fwd_comm);
    r.fwd_tp += fwd_tp;
    if (op.selective_recompute) r.core_fwd += fwd_tp;
    const double grad_comm = comm(op.bwd_comm), regather = comm(op.bwd_regather);
    if (host_cost) {
      // The op's kernels (the one kernel list of hardware::op_kernels) share its time; each
      // collective is a kernel of its own on the stream.
      auto launches = [](const graph::TpComm& cm) { return cm.kind != graph::CommKind::kNone; };
      const double fk = static_cast<double>(hardware::op_kernels(op, at, d, hardware::Pass::kForward).size());
      const double bwd_kernels =
          resolved.has_bwd ? static_cast<double>(hardware::op_kernels(op, at, d, hardware::Pass::kBackward).size()) : 0;
      add(fwd_kernels_list, fk, t.fwd);
      if (launches(op.fwd_comm)) fwd_kernels_list.push_back(fwd_tp);
      if (op.selective_recompute) {
        add(core_kernels_list, fk, t.fwd);
        if (launches(op.fwd_comm)) core_kernels_list.push_back(fwd_tp);
      }
      bwd_groups.emplace_back();
      add(bwd_groups.back(), bwd_kernels, t.bwd);
      if (launches(op.bwd_comm)) bwd_groups.back().push_back(grad_comm);
      if (launches(op.bwd_regather)) bwd_groups.back().push_back(regather);
    }
    r.bwd_tp += grad_comm + regather;
    // Megatron's column-parallel linear launches its backward collectives asynchronously: the input
    // re-gather (sequence parallelism) runs under the input-gradient GEMM, the all-reduce or
    // reduce-scatter of the input gradient under the weight-gradient GEMM (the two GEMMs have the
    // same FLOPs: half the backward each). A row-parallel linear's all-gather precedes both GEMMs.
    auto hidden = [&](double gemm, double c) {
      return overlap_time(gemm, c, k.interference) - gemm;
    };
    const bool column = op.bwd_comm.kind == graph::CommKind::kAllReduce ||
                        op.bwd_comm.kind == graph::CommKind::kReduceScatter;
    if (op.is_gemm && column)
      r.bwd_tp_async += hidden(t.bwd / 2, regather) + hidden(t.bwd / 2, grad_comm);
    else
      r.bwd_tp_async += grad_comm + regather;
  }
  if (host_cost) {
    const double h = k.perf.host_per_kernel_s;
    std::vector<double> bwd;
    for (auto it = bwd_groups.rbegin(); it != bwd_groups.rend(); ++it) bwd.insert(bwd.end(), it->begin(), it->end());
    auto then = [](std::vector<double> a, const std::vector<double>& b) {
      a.insert(a.end(), b.begin(), b.end());
      return a;
    };
    // A collective in the layer (TP's, the dispatcher's, context parallelism's) waits for the
    // slowest of its ranks' hosts: the lead a host builds does not survive it, so each pass starts
    // with an empty stream. A layer with none keeps the lead from the layer before, the steady
    // state of identical layers: the pass takes the longer of its GPU time and its launches.
    auto stall = [&](const std::vector<double>& ks) {
      if (meets_other_ranks) return host_stall(ks, h);
      double sum = 0;
      for (double g : ks) sum += g;
      return std::max(0.0, h * static_cast<double>(ks.size()) - sum);
    };
    r.stall_fwd = stall(fwd_kernels_list);
    r.stall_bwd = stall(bwd);
    r.stall_bwd_core = stall(then(core_kernels_list, bwd));
    r.stall_bwd_rc = stall(then(fwd_kernels_list, bwd));
  }
  r.params = sym::evaluate_or_zero(L.params(), at);
  r.expert_params = sym::evaluate_or_zero(L.expert_params(), at);
  r.fp8_params = sym::evaluate_or_zero(L.fp8_params(), at);
  r.fp8_expert_params = sym::evaluate_or_zero(L.fp8_expert_params(), at);
  r.saved = sym::evaluate_or_zero(selective ? acts.saved_selective : acts.saved, at);
  return r;
}

// Compute overlapped with an NCCL collective and PCIe copies (`host`: both directions'
// time): the two GPU streams slow each other while both run; copy engines do not slow compute.
double overlapped(double compute, double collective, double host, const Interference& f) {
  return std::max(overlap_time(compute, collective, f), host);
}

}  // namespace

double host_stall(const std::vector<double>& kernels, double host) {
  double launched = 0, ended = 0, busy = 0;
  for (const double g : kernels) {
    launched += host;
    ended = std::max(launched, ended) + g;
    busy += g;
  }
  return std::max(0.0, ended - busy);
}

double overlap_time(double compute, double comm, const Interference& f) {
  if (compute <= 0 || comm <= 0) return std::max(compute, 0.0) + std::max(comm, 0.0);
  const double c = compute * f.compute, g = comm * f.collective;  // both alone, slowed
  // The shorter ends at min(c, g); what the longer has left runs at full speed.
  return c >= g ? compute + g * (1 - 1 / f.compute) : comm + c * (1 - 1 / f.collective);
}

double optimizer_step_bytes(const spec::TrainingSpec& t) {
  const double state = optimizer_bytes_per_param(t);  // fp32 master (mixed precision) + moments
  const double gb = spec::dtype_bytes(t.grad_dtype), wb = spec::dtype_bytes(t.precision);
  const double main_grad = t.mixed_precision() ? 4 : gb;
  // The update reads the states, the master weights and the gradient, and writes states and master
  // (fp32 training: the weights are the master copy).
  double bytes = 2 * state + main_grad + (t.mixed_precision() ? 0 : 2 * wb);
  bytes += main_grad;  // the gradient norm for clipping (Megatron --clip-grad 1.0, DeepSpeed, torchtitan)
  if (t.mixed_precision()) {
    if (gb < 4) bytes += gb + 4;                         // 16-bit gradients copied into fp32 main gradients
    if (t.precision == spec::Dtype::kFp16) bytes += 8;  // loss scaling: unscale and inf/nan check
    bytes += 4 + wb;                                     // the updated master copied into the 16-bit weights
  }
  return bytes;
}

PipelineTime pipeline_time(const std::vector<double>& stable, const std::vector<double>& delta,
                           const std::vector<double>& drain, int64_t micro_batches, int64_t v) {
  if (stable.empty()) return {};
  const double sum = std::accumulate(stable.begin(), stable.end(), 0.0);
  const double mx = *std::max_element(stable.begin(), stable.end());
  double exposed = 0, before = 0;
  for (size_t i = 0; i < stable.size(); ++i) {
    exposed = std::max(exposed, delta[i] - before / static_cast<double>(v));
    if (i < drain.size()) before += drain[i];
  }
  return pipeline_time(sum, mx, exposed, static_cast<double>(micro_batches), v);
}

PipelineTime pipeline_time(double sum_t, double max_t, double exposed, double micro_batches, int64_t v) {
  PipelineTime r;
  r.fill = v > 1 ? max_t + (sum_t - max_t) / static_cast<double>(v) : sum_t;
  r.steady = (micro_batches - 1) * max_t;
  r.exposed_delta = std::max(0.0, exposed);
  return r;
}

Result<StageTimer> StageTimer::create(const PreparedJob& job, const plan::Plan& p) {
  const auto& m = job.model();
  const auto& c = job.cluster();
  const auto& t = job.training();
  StageTimer r;
  r.cluster_ = c;
  r.training_ = t;
  r.layout_ = p;
  r.layout_.stages.clear();
  r.k_ = job.constants();
  const bool sp = p.sequence_parallel && p.tp > 1;
  const bool selective = p.recompute == plan::Recompute::kSelective;
  MIST_TRY(const Lowering* lowering, job.lowering(p));
  const graph::LoweredModel& lm = lowering->model;
  sym::Bindings at = lm.dims;
  at["b"] = static_cast<double>(p.micro_batch_size);
  bind_parallel_degrees(at, p);
  r.place_ = hardware::place_groups(c, p.tp, p.dp, p.pp, p.ep, p.etp, p.cp, p.cp_a2a);
  const profile::OpTable* table = r.k_.profile.get();
  const StageMemoryModel& mem = lowering->memory;
  r.blk_ = layer_times(lm.block, mem.block, at, c, t.precision, r.place_, selective, r.k_, table, r.sources_);
  if (lm.dense_blocks > 0)
    r.dns_ = layer_times(lm.dense_block, mem.dense_block, at, c, t.precision, r.place_, selective, r.k_, table,
                         r.sources_);
  r.dense_blocks_ = static_cast<double>(lm.dense_blocks);
  r.emb_ = layer_times(lm.embedding, mem.embedding, at, c, t.precision, r.place_, selective, r.k_, table,
                       r.sources_);
  r.head_ = layer_times(lm.head, mem.head, at, c, t.precision, r.place_, selective, r.k_, table, r.sources_);
  r.tied_params_ = sym::evaluate_or_zero(lm.embedding_copy_params, at);
  r.fp8_params_ = lm.options.fp8_params;
  // Activations crossing a stage boundary, per GPU: sharded t ways (sequence parallelism, or
  // Megatron's scatter/gather of the boundary tensor across the TP ranks), and cp ways along the
  // sequence.
  const double boundary = at["s"] * at["b"] * at["h"] * spec::dtype_bytes(t.precision) /
                          static_cast<double>(p.tp * p.cp);
  r.p2p_s_ = hardware::p2p_time(c, r.place_.pp_crosses_nodes, boundary, r.k_.comm);
  // Without sequence parallelism the receiver all-gathers the t slices over the TP group before
  // using them (Megatron's scatter/gather optimisation, Narayanan et al. SC21 §4.1).
  if (!sp && p.tp > 1)
    r.p2p_s_ += hardware::collective_time(c, Collective::kAllGather, r.place_.tp, boundary * static_cast<double>(p.tp), r.k_.comm);

  // Model FLOPs: 3 × the forward matmul FLOPs of the whole model (no recompute), one sequence at t = 1.
  sym::Bindings one = lm.dims;
  one["b"] = 1;
  one["t"] = one["cp"] = one["ep"] = one["etp"] = 1;
  auto matmul_flops = [&](const graph::Layer& L) {
    double f = 0;
    for (const auto& op : L.ops)
      if (op.is_gemm || op.kind == graph::OpKind::kFlashAttention) f += sym::evaluate_or_zero(op.fwd_flops, one);
    return f;
  };
  const double dense = static_cast<double>(lm.dense_blocks);
  const double per_sequence = matmul_flops(lm.embedding) + (static_cast<double>(m.num_layers) - dense) * matmul_flops(lm.block) +
                              (dense > 0 ? dense * matmul_flops(lm.dense_block) : 0) + matmul_flops(lm.head);
  r.model_flops_ = 3.0 * per_sequence * static_cast<double>(t.global_batch_size);
  return r;
}

Result<LayerTimes> block_op_times(const PreparedJob& job, const plan::Plan& p, std::string_view prefix) {
  MIST_TRY(const Lowering* lowering, job.lowering(p));
  const graph::LoweredModel& lm = lowering->model;
  sym::Bindings at = lm.dims;
  at["b"] = static_cast<double>(p.micro_batch_size);
  bind_parallel_degrees(at, p);
  const auto place = hardware::place_groups(job.cluster(), p.tp, p.dp, p.pp, p.ep, p.etp, p.cp, p.cp_a2a);
  const TimeConstants& k = job.constants();
  profile::SourceCounts sources;
  return layer_times(lm.block, lowering->memory.block, at, job.cluster(), job.training().precision, place,
                     p.recompute == plan::Recompute::kSelective, k, k.profile.get(), sources, prefix);
}

StageTimeParts StageTimer::parts(const plan::StagePlan& st, int index) const {
  const auto& p = layout_;
  const auto& c = cluster_;
  const auto& t = training_;
  const auto& k = k_;
  const auto& blk = blk_;
  const auto& emb = emb_;
  const auto& head = head_;
  const bool selective = p.recompute == plan::Recompute::kSelective;
  const double wb = spec::dtype_bytes(t.precision), gb = spec::dtype_bytes(t.grad_dtype);
  const double v = static_cast<double>(p.virtual_pipeline_stages);
  const bool first = index == 0, last = index + 1 == p.pp;
  const double l = static_cast<double>(st.num_layers), ck = static_cast<double>(st.ckpt_layers);
  const auto& off = st.offload;
  const auto& place = place_;
  StageTimeParts s;
  // A collective over the data-parallel group for `dense` bytes, then over the expert one for `exp`.
  auto dp_collective = [&](Collective op, double dense, double exp) {
    return hardware::collective_time(c, op, place.dp, dense, k.comm) +
           hardware::collective_time(c, op, place.edp, exp, k.comm);
  };
  const plan::ShardFactors shard = plan::shard_factors(st.zero, p.dp);
  const plan::ShardFactors shard_x = plan::shard_factors(st.zero, plan::expert_dp(p));
  const Interference& fi = k.interference;
  // TP collectives are serial (Mist's assumption) unless pipelined with their GEMMs.
  const bool tp_hidden = p.overlap_tp_comm && p.tp > 1;
  // Per block: ZeRO-3 gathers the block's weights in forward and backward, ZeRO-2+ reduce-
  // scatters its gradients every micro-batch; offloading swaps shares in and out over PCIe. A
  // mixture of experts' expert weights are sharded and reduced over the expert data-parallel group.
  // pair, pair_recomputed: a forward and a backward (recomputed) run together with the MoE
  // dispatcher's all-to-alls on their own stream (plan.overlap_moe_a2a), step by step.
  struct BlockPasses {
    double fwd = 0, bwd = 0, bwd_recomputed = 0, recompute = 0;
    double pair = 0, pair_recomputed = 0;
    double a2a_fwd = 0, a2a_bwd = 0;  // the dispatcher's all-to-alls in each pass
  };
  // Bytes of a layer's weights, dense and expert: wb each, an FP8 parameter one.
  auto weight_bytes = [&](const LayerTimes& x) {
    const double f8 = fp8_params_ ? x.fp8_params - x.fp8_expert_params : 0, f8x = fp8_params_ ? x.fp8_expert_params : 0;
    return std::pair{(x.params - x.expert_params - f8) * wb + f8, (x.expert_params - f8x) * wb + f8x};
  };
  auto passes = [&](const LayerTimes& x) {
    const double x_dense = x.params - x.expert_params, x_exp = x.expert_params;
    const auto [w_dense, w_exp] = weight_bytes(x);
    const double ag = st.zero >= 3 ? dp_collective(Collective::kAllGather, w_dense, w_exp) : 0;
    const double rs = st.zero >= 2 ? dp_collective(Collective::kReduceScatter, x_dense * gb, x_exp * gb) : 0;
    const double w_shard = w_dense / shard.weights + w_exp / shard_x.weights;
    const double g_shard = (x_dense / shard.gradients + x_exp / shard_x.gradients) * gb;
    // Offloaded shares over PCIe: forward brings the weights in and sends the saved activations
    // out; backward brings weights, activations and the gradients to accumulate in, and sends the
    // gradients out (both directions at once, within the node's host bandwidth).
    const double w_in = off.weights * w_shard, g_io = off.gradients * g_shard, a_io = off.activations * x.saved;
    const double fwd_host = hardware::host_copy_time(c, w_in, a_io, k.comm);
    const double bwd_host = hardware::host_copy_time(c, w_in + a_io + g_io, g_io, k.comm);
    const double fwd_tp = tp_hidden ? 0 : x.fwd_tp;
    const double bwd_tp = tp_hidden ? 0 : p.async_tp_backward ? x.bwd_tp_async : x.bwd_tp;
    const double fwd_tp_ov = tp_hidden ? x.fwd_tp : 0, bwd_tp_ov = tp_hidden ? x.bwd_tp : 0;
    // The dispatcher's all-to-alls (the exposed collectives other than context parallelism's).
    const double a2a_fwd = x.fwd_exposed - x.fwd_cp, a2a_bwd = x.bwd_exposed - x.bwd_cp;
    const double fwd_gpu = overlapped(x.fwd, ag + fwd_tp_ov, fwd_host, fi) + fwd_tp + x.fwd_cp;
    const double bwd_gpu =
        overlapped(x.bwd + (selective ? x.core_fwd : 0), ag + rs + bwd_tp_ov, bwd_host, fi) + bwd_tp + x.bwd_cp;
    const double recompute_gpu = x.fwd + x.fwd_tp + x.fwd_cp;
    const double bwd_rc_gpu =
        overlapped(x.bwd + recompute_gpu + a2a_fwd, ag + rs + bwd_tp_ov + fwd_tp_ov, bwd_host, fi) - a2a_fwd + bwd_tp +
        x.bwd_cp;
    // The GPU waits for the host where the pass's kernels are shorter than their launches.
    const double stall_bwd = selective ? x.stall_bwd_core : x.stall_bwd;
    BlockPasses b;
    b.a2a_fwd = a2a_fwd;
    b.a2a_bwd = a2a_bwd;
    b.fwd = fwd_gpu + a2a_fwd + x.stall_fwd;
    b.recompute = recompute_gpu + a2a_fwd;
    b.bwd = bwd_gpu + a2a_bwd + stall_bwd;
    b.bwd_recomputed = bwd_rc_gpu + a2a_fwd + a2a_bwd + x.stall_bwd_rc;
    // Megatron's combined 1F1B runs a block's forward (micro-batch A) and backward (B) in four
    // steps, compute on one stream beside an all-to-all on the other (combined_1f1b.py at d98e8a64):
    // A's attention up to its dispatch (and after its combine) beside B's combine backward; B's
    // experts' backward beside A's dispatch; A's experts beside B's dispatch backward; B's attention
    // backward beside A's combine. A dispatch and a combine move the same rows: half the pass's
    // all-to-all time each. Each step takes the longer of its two (slowed while both run). A
    // recomputed block first redoes its forward, its all-to-alls exposed.
    const double mlp_f = x.fwd > 0 ? fwd_gpu * x.inner_fwd / x.fwd : 0;
    const double mlp_b = x.bwd > 0 ? bwd_gpu * x.inner_bwd / x.bwd : 0;
    auto steps = [&](double attention_bwd) {
      return overlap_time(fwd_gpu - mlp_f, a2a_bwd / 2, fi) + overlap_time(mlp_b, a2a_fwd / 2, fi) +
             overlap_time(mlp_f, a2a_bwd / 2, fi) + overlap_time(attention_bwd, a2a_fwd / 2, fi);
    };
    b.pair = steps(bwd_gpu - mlp_b) + x.stall_fwd + stall_bwd;
    b.pair_recomputed = steps(bwd_rc_gpu - mlp_b) + a2a_fwd + x.stall_fwd + x.stall_bwd_rc;
    return b;
  };
  const BlockPasses mb = passes(blk);
  // A mixture of experts' first dense blocks (plan::dense_blocks: all on stage 0), recomputed
  // first when the stage recomputes some of its blocks (Megatron's --recompute-method block).
  const double nd = static_cast<double>(first ? dense_blocks_ : 0), ckd = std::min(ck, nd);
  const BlockPasses db = nd > 0 ? passes(dns_) : BlockPasses{};
  const double blk_dense = blk.params - blk.expert_params, blk_exp = blk.expert_params;
  // The head's expert weights (its multi-token prediction blocks'), on the last stage.
  const double head_exp = last ? head.expert_params : 0, head_dense = last ? head.params - head.expert_params : 0;

  // The embedding and the head run unoverlapped; the head's multi-token prediction blocks have
  // their dispatchers' exposed all-to-alls and, under selective recompute, their attention cores
  // recomputed in backward.
  auto edge_fwd = [&](const LayerTimes& x) { return x.fwd + x.fwd_tp + x.fwd_exposed + x.stall_fwd; };
  auto edge_bwd = [&](const LayerTimes& x) {
    return x.bwd + (selective ? x.core_fwd : 0) + (p.async_tp_backward ? x.bwd_tp_async : x.bwd_tp) + x.bwd_exposed +
           (selective ? x.stall_bwd_core : x.stall_bwd);
  };
  // With the MoE all-to-alls overlapped (Megatron's combined 1F1B) each MoE block's forward runs
  // beside another micro-batch's backward of it in the steady state: what the pair saves comes off
  // the two passes in proportion to their all-to-alls (each keeps at least its compute). The
  // warm-up's forwards and the cool-down's backwards (as many as the stage holds in flight) run
  // unpaired: that is paid once per iteration (a2a_unpaired).
  const double save = p.overlap_moe_a2a ? std::max(0.0, mb.fwd + mb.bwd - mb.pair) : 0;
  const double save_rc = p.overlap_moe_a2a ? std::max(0.0, mb.fwd + mb.bwd_recomputed - mb.pair_recomputed) : 0;
  const double paired = (l - nd - (ck - ckd)) * save + (ck - ckd) * save_rc;
  const double fwd_share = paired > 0 && mb.a2a_fwd + mb.a2a_bwd > 0 ? mb.a2a_fwd / (mb.a2a_fwd + mb.a2a_bwd) : 0;
  // Alone: the first forward and the last backward (what the data-parallel collectives hide under).
  const double fwd_alone = (l - nd) * mb.fwd + nd * db.fwd + (first ? edge_fwd(emb) : 0) + (last ? edge_fwd(head) : 0);
  const double bwd_alone = (l - nd - (ck - ckd)) * mb.bwd + (ck - ckd) * mb.bwd_recomputed + (nd - ckd) * db.bwd +
                           ckd * db.bwd_recomputed + (first ? edge_bwd(emb) : 0) + (last ? edge_bwd(head) : 0);
  const double fwd = fwd_alone - paired * fwd_share, bwd = bwd_alone - paired * (1 - fwd_share);
  s.a2a_unpaired = paired > 0 ? paired * in_flight_micro_batches(p, index) : 0;
  // Without fused gradient accumulation, each micro-batch's weight gradients are added into the
  // accumulated ones by a separate kernel (Megatron-LM 2021's local DDP hook main_grad.add_(grad),
  // PyTorch's AccumulateGrad): it reads both and writes one, gradient dtype, once per parameter
  // kept (ZeRO-2/3 reduce-scatter every micro-batch and accumulate their shard).
  const double dns_params = nd * dns_.params;
  const double accum_params =
      ((l - nd) * blk_dense + dns_params + (first ? emb.params : 0) + head_dense) / shard.gradients +
      ((l - nd) * blk_exp + head_exp) / shard_x.gradients;
  const double accum =
      p.grad_accumulation_fusion ? 0 : hardware::streaming_time(c.gpu, accum_params * 3 * gb, k.perf);
  const double n_boundaries = (first ? 0.0 : 1.0) + (last ? 0.0 : 1.0);
  const double p2p_s = n_boundaries * v * p2p_s_;
  s.fwd = fwd;
  s.bwd = bwd + accum;
  s.p2p = p2p_s;
  s.recompute = (ck - ckd) * mb.recompute + ckd * db.recompute +
                (selective ? (l - nd - (ck - ckd)) * blk.core_fwd + (nd - ckd) * dns_.core_fwd +
                                 (last ? head.core_fwd : 0)
                           : 0);
  auto tp_of = [](const LayerTimes& x) { return x.fwd_tp + x.bwd_tp + x.fwd_exposed + x.bwd_exposed; };
  s.tp = (l - nd) * tp_of(blk) + nd * tp_of(dns_) + (ck - ckd) * (blk.fwd_tp + blk.fwd_exposed) +
         ckd * (dns_.fwd_tp + dns_.fwd_exposed);

  // Once per iteration: gradient reduction (ZeRO-0/1), the all-gather of updated parameters
  // (ZeRO-1+; ZeRO-3 gathers per layer instead), the optimizer step, the tied-embedding sync.
  const double stage_params = (l - nd) * blk.params + dns_params + (first ? emb.params : 0) +
                              (last ? head.params : 0) + (last && p.pp > 1 ? tied_params_ : 0);
  const double stage_exp = (l - nd) * blk_exp + head_exp, stage_dense = stage_params - stage_exp;
  double grad_sync = 0, param_gather = 0;
  // With overlap, the bucket reduced last is launched when the backward has ended, and the one
  // gathered first must arrive before the forward starts: they run exposed, the other buckets
  // under the compute. A parameter larger than a bucket is a bucket of its own (Megatron-Core's
  // buffer gives the shared embedding its own; DeepSpeed reduces a parameter over its bucket size
  // alone), and on the first stage the embedding is that parameter: its gradient is the last the
  // backward makes, its weights the first the forward needs.
  const double edge_bucket = std::min(
      1.0, std::max(k.ddp_bucket_params, first ? emb.params : 0.0) / std::max(1.0, stage_params));
  auto exposed_of = [&](double under, double comm) {
    const double rest = comm * (1 - edge_bucket);
    return overlapped(under, rest, 0, fi) - under + comm * edge_bucket;
  };
  // The first and the last model chunk's shares of the stage's passes: 1/v each, or their blocks'
  // share where the chunks differ in size (plan.stages[i].chunk_layers).
  const bool stated = !st.chunk_layers.empty() && l > 0;
  const double first_chunk_share = stated ? static_cast<double>(st.chunk_layers.front()) / l : 1 / v;
  const double last_chunk_share = stated ? static_cast<double>(st.chunk_layers.back()) / l : 1 / v;
  if (st.zero <= 1) {
    grad_sync = dp_collective(st.zero == 1 ? Collective::kReduceScatter : Collective::kAllReduce, stage_dense * gb,
                              stage_exp * gb);
    if (p.overlap_grad_reduce) {
      // Hidden behind the last backward of the stage's last chunk (all of it when v = 1): an
      // interleaved stage's final chunk runs bwd / v, and so its D falls by at most 1/v of what
      // more compute adds to T (the tuner's pruning relies on it, docs/tuner.md).
      // What runs beside the backward slows it as any overlap does (the interference).
      const double under = bwd_alone * last_chunk_share;
      grad_sync = exposed_of(under, grad_sync);
    }
  }
  if (st.zero >= 1 && st.zero <= 2) {
    // FP8 parameters are gathered in FP8: the blocks' FP8 linears take wb - 1 bytes less each.
    const double saved = fp8_params_ ? wb - 1 : 0;
    const double f8_dense = saved * ((l - nd) * (blk.fp8_params - blk.fp8_expert_params) +
                                     nd * (dns_.fp8_params - dns_.fp8_expert_params) +
                                     (last ? head.fp8_params - head.fp8_expert_params : 0));
    const double f8_exp = saved * ((l - nd) * blk.fp8_expert_params + nd * dns_.fp8_expert_params +
                                   (last ? head.fp8_expert_params : 0));
    param_gather = dp_collective(Collective::kAllGather, stage_dense * wb - f8_dense, stage_exp * wb - f8_exp);
    if (p.overlap_param_gather) {
      const double under = fwd_alone * first_chunk_share;  // the first chunk's forward
      param_gather = exposed_of(under, param_gather);
    }
  }
  const double local = stage_dense / shard.optimizer_states + stage_exp / shard_x.optimizer_states;
  const double step_gpu =
      hardware::streaming_time(c.gpu, (1 - off.optimizer_states) * local * optimizer_step_bytes(t), k.perf);
  const double step_cpu = off.optimizer_states > 0
                              ? off.optimizer_states * local / k.cpu_adam_params_per_s +
                                    // the gradients out, then the updated weights back in
                                    hardware::host_copy_time(c, 0, off.optimizer_states * local * gb, k.comm) +
                                    hardware::host_copy_time(c, off.optimizer_states * local * wb, 0, k.comm)
                              : 0;
  const double step = std::max(step_gpu, step_cpu);
  const double tied_sync = (p.pp > 1 && tied_params_ > 0 && (first || last))
                               ? hardware::p2p_time(c, c.spans_domains(), tied_params_ * gb, k.comm) * 2
                               : 0;
  s.grad_sync = grad_sync;
  s.param_gather = param_gather;
  s.step = step;
  s.tied_sync = tied_sync;
  return s;
}

StageTime StageTimer::time(const plan::StagePlan& st, int index) const {
  const StageTimeParts p = parts(st, index);
  StageTime s;
  s.index = index;
  s.fwd_s = p.fwd;
  s.bwd_s = p.bwd;
  s.drain_s = p.drain();
  s.stable_s = p.stable();
  s.delta_s = p.delta();
  s.stable_terms = {
      {"forward", "blocks, embedding/head forward incl. TP collectives and overlapped ZeRO-3/offload", p.fwd},
      {"backward", "input and weight gradients, recompute, TP collectives, overlapped ZeRO/offload", p.bwd},
      {"recompute", "(part of backward) forward recomputation of fully recomputed blocks / selectively recomputed modules", p.recompute},
      {"tp_communication", "(part of forward and backward) tensor-parallel collectives", p.tp},
      {"pipeline_p2p", "sending activations and their gradients to neighbouring stages", p.p2p},
  };
  s.delta_terms = {
      {"gradient_sync", "data-parallel gradient all-reduce / reduce-scatter not hidden by backward", p.grad_sync},
      {"parameter_gather", "ZeRO-1/2 all-gather of updated parameters not hidden by forward", p.param_gather},
      {"optimizer_step", "optimizer update on the GPU (and on the CPU for offloaded states)", p.step},
      {"tied_embedding_sync",
       "all-reduce of the word embedding's gradient between first and last stage (a tied LM head, or multi-token "
       "prediction's lookup)",
       p.tied_sync},
  };
  if (layout_.overlap_moe_a2a)
    s.delta_terms.push_back({"moe_a2a_unpaired",
                             "the MoE all-to-alls the warm-up forwards and cool-down backwards run exposed "
                             "(overlap_moe_a2a pairs the others)",
                             p.a2a_unpaired});
  return s;
}

Result<TimePrediction> iteration_time(const PreparedJob& job, const plan::Plan& p) {
  const auto& c = job.cluster();
  const auto& t = job.training();
  MIST_TRY(const StageTimer timer, StageTimer::create(job, p));
  TimePrediction out;
  std::vector<double> T, D, B;
  for (size_t i = 0; i < p.stages.size(); ++i) {
    StageTime s = timer.time(p.stages[i], static_cast<int>(i));
    T.push_back(s.stable_s);
    D.push_back(s.delta_s);
    B.push_back(s.drain_s);
    out.stages.push_back(std::move(s));
  }
  const PipelineTime pipe = pipeline_time(T, D, B, p.grad_accum_steps, p.virtual_pipeline_stages);
  out.iteration_time_s = pipe.total();
  out.pipeline_fill_s = pipe.fill;
  out.steady_s = pipe.steady;
  out.exposed_delta_s = out.iteration_time_s - out.pipeline_fill_s - out.steady_s;

  out.op_sources = timer.op_sources();
  out.model_flops_per_iteration = timer.model_flops_per_iteration();
  const double gpus = static_cast<double>(c.num_gpus());
  out.tokens_per_s = static_cast<double>(t.global_batch_size * t.seq_length) / out.iteration_time_s;
  out.model_tflops_per_gpu = out.model_flops_per_iteration / out.iteration_time_s / gpus / 1e12;
  out.mfu = out.model_tflops_per_gpu * 1e12 / hardware::peak_matmul_flops(c.gpu, t.precision);
  return out;
}

}  // namespace mist::analysis
