#include "analysis/allocation_trace.hpp"

#include <algorithm>
#include <cmath>
#include <unordered_map>
#include <utility>

#include "graph/liveness.hpp"
#include "sim/pipeline_sim.hpp"
#include "spec/training.hpp"

namespace mist::analysis {

namespace {

using allocator::Event;

// The trace being written: every allocation gets a fresh id.
class Builder {
 public:
  int64_t alloc(double bytes, int stream = kComputeStream) {
    const int64_t b = static_cast<int64_t>(std::llround(bytes));
    if (b <= 0) return 0;
    const int64_t id = next_++;
    events_.push_back({Event::Kind::kAlloc, id, b, stream});
    return id;
  }
  void free(int64_t& id) {
    if (id > 0) events_.push_back({Event::Kind::kFree, id, 0, 0});
    id = 0;
  }
  std::vector<Event> take() { return std::move(events_); }

 private:
  std::vector<Event> events_;
  int64_t next_ = 1;
};

// One layer of one micro-batch: the layer trace's keys bound to trace ids, from its forward to the
// end of its backward.
struct Instance {
  const graph::LayerTrace* trace = nullptr;
  std::unordered_map<int, int64_t> ids;
};

void run(Builder& B, const std::vector<graph::LayerTrace::Event>& events, std::unordered_map<int, int64_t>& ids) {
  for (const auto& e : events) {
    if (e.alloc) {
      ids[e.key] = B.alloc(e.bytes);
      continue;
    }
    auto it = ids.find(e.key);
    if (it == ids.end()) continue;
    B.free(it->second);
    ids.erase(it);
  }
}

// Runs the forward; returns the output's id (now owned by the layer downstream).
int64_t forward(Builder& B, Instance& in, int64_t input) {
  in.ids[in.trace->input_key] = input;
  run(B, in.trace->forward, in.ids);
  auto it = in.ids.find(in.trace->output_key);
  if (it == in.ids.end()) return 0;
  const int64_t out = it->second;
  in.ids.erase(it);
  return out;
}

// Runs the backward; returns the input gradient's id (owned upstream). Frees what is left.
int64_t backward(Builder& B, Instance& in, int64_t output_grad) {
  in.ids[in.trace->output_grad_key] = output_grad;
  run(B, in.trace->backward, in.ids);
  int64_t grad = 0;
  if (auto it = in.ids.find(in.trace->input_grad_key); in.trace->input_grad_key >= 0 && it != in.ids.end()) {
    grad = it->second;
    in.ids.erase(it);
  }
  for (auto& [k, id] : in.ids) B.free(id);
  in.ids.clear();
  return grad;
}

// A layer of the stage as the trace runs it.
// A parameter tensor: its elements on one GPU, and whether it is an expert weight (sharded over the
// expert data-parallel group; Megatron keeps expert weights in buffers of their own).
struct ParamTensor {
  double n = 0;
  bool expert = false;
  bool fp8 = false;  // an FP8 linear's weight
};

struct StageLayer {
  const graph::LayerTrace* trace = nullptr;
  double params = 0;                 // parameters on one GPU (before ZeRO sharding)
  std::vector<ParamTensor> tensors;  // their split into parameter tensors (one per op holding any)
};

std::vector<ParamTensor> param_tensors(const graph::Layer& L, const sym::Bindings& b) {
  std::vector<ParamTensor> v;
  for (const auto& op : L.ops) {
    const double n = sym::evaluate_or_zero(op.params, b);
    if (n > 0) v.push_back({n, op.expert, op.fp8});
  }
  return v;
}

// Elements of the tensors that are (expert) or are not (!expert) expert weights.
double sum(const std::vector<ParamTensor>& v, bool expert) {
  double s = 0;
  for (const auto& x : v)
    if (x.expert == expert) s += x.n;
  return s;
}
double sum(const std::vector<ParamTensor>& v) { return sum(v, false) + sum(v, true); }
// Elements of the FP8 linears' weights among them.
double sum_fp8(const std::vector<ParamTensor>& v, bool expert) {
  double s = 0;
  for (const auto& x : v)
    if (x.expert == expert && x.fp8) s += x.n;
  return s;
}
// The bytes of those tensors' weights: wb each, the FP8 linears' one with FP8 parameters.
double weight_bytes(const std::vector<ParamTensor>& v, bool expert, double wb, bool fp8_params) {
  return wb * sum(v, expert) - (fp8_params ? (wb - 1) * sum_fp8(v, expert) : 0.0);
}

}  // namespace

bool expandable_segments_by_default(spec::Engine engine) { return engine == spec::Engine::kTorchtitan; }

Result<AllocationTrace> stage_allocation_trace(const PreparedJob& job, const plan::Plan& p, int stage,
                                               int iterations) {
  MIST_TRY(const Lowering* lowering, job.lowering(p));
  const graph::LoweredModel& lm = lowering->model;
  const spec::TrainingSpec& tr = job.training();
  const plan::StagePlan& st = p.stages.at(static_cast<size_t>(stage));
  const bool first = stage == 0, last = stage + 1 == p.pp;
  const bool torchtitan = job.engine() == spec::Engine::kTorchtitan;

  sym::Bindings b = lm.dims;
  b["b"] = static_cast<double>(p.micro_batch_size);
  bind_parallel_degrees(b, p);

  const graph::TraceMode block_mode =
      p.recompute == plan::Recompute::kSelective ? graph::TraceMode::kSelective : graph::TraceMode::kSaveAll;
  const graph::LayerTrace block = graph::trace_layer(lm.block, b, block_mode);
  const graph::LayerTrace block_full = graph::trace_layer(lm.block, b, graph::TraceMode::kFull);
  // A mixture of experts' first dense blocks, at the start of stage 0 (plan::dense_blocks).
  const int64_t nd = plan::dense_blocks(job.model(), stage);
  const graph::LayerTrace dense = nd > 0 ? graph::trace_layer(lm.dense_block, b, block_mode) : graph::LayerTrace{};
  const graph::LayerTrace dense_full =
      nd > 0 ? graph::trace_layer(lm.dense_block, b, graph::TraceMode::kFull) : graph::LayerTrace{};
  const auto dense_tensors = nd > 0 ? param_tensors(lm.dense_block, b) : std::vector<ParamTensor>{};
  const graph::LayerTrace emb = graph::trace_layer(lm.embedding, b, graph::TraceMode::kSaveAll);
  // The head recomputes only its multi-token prediction blocks' attention cores (selective).
  const graph::LayerTrace head = graph::trace_layer(lm.head, b, block_mode);

  // The stage's layers, split into its model chunks (interleaved 1F1B).
  const int64_t v = std::max<int64_t>(1, p.virtual_pipeline_stages);
  std::vector<std::vector<StageLayer>> chunks(static_cast<size_t>(v));
  const auto blk_tensors = param_tensors(lm.block, b);
  const int64_t l = st.num_layers;
  const auto chunk_layers = plan::stage_chunk_layers(p, static_cast<size_t>(stage));
  for (int64_t c = 0, from = 0; c < v; ++c) {
    auto& ch = chunks[static_cast<size_t>(c)];
    if (first && c == 0) ch.push_back({&emb, 0, param_tensors(lm.embedding, b)});
    const int64_t to = from + chunk_layers[static_cast<size_t>(c)];
    for (int64_t j = std::exchange(from, to); j < to; ++j) {
      const bool ckpt = j < st.ckpt_layers;
      if (j < nd) ch.push_back({ckpt ? &dense_full : &dense, 0, dense_tensors});
      else ch.push_back({ckpt ? &block_full : &block, 0, blk_tensors});
    }
    if (last && c == v - 1) {
      auto t = param_tensors(lm.head, b);
      // The word embedding's copy (the tied LM head's, or multi-token prediction's lookup table).
      if (const double copy = sym::evaluate_or_zero(lm.embedding_copy_params, b); p.pp > 1 && copy > 0)
        t.push_back({copy, false});
      ch.push_back({&head, 0, t});
    }
    for (auto& s : ch) s.params = sum(s.tensors);
  }

  const plan::ShardFactors z = plan::shard_factors(st.zero, plan::grad_dp(p));
  const plan::ShardFactors zx = plan::shard_factors(st.zero, plan::expert_dp(p));
  const auto& off = st.offload;
  const double wb = spec::dtype_bytes(tr.precision), gb = spec::dtype_bytes(tr.grad_dtype);
  const double K = optimizer_bytes_per_param(tr);
  const double master = tr.mixed_precision() ? 4.0 : 0.0;
  const double w_per = wb * (1 - off.weights) / z.weights, g_per = gb * (1 - off.gradients) / z.gradients;
  const double o_keep = (1 - off.optimizer_states) / z.optimizer_states;
  // The same for expert weights, sharded over the expert data-parallel group.
  const double w_per_x = wb * (1 - off.weights) / zx.weights, g_per_x = gb * (1 - off.gradients) / zx.gradients;
  const double o_keep_x = (1 - off.optimizer_states) / zx.optimizer_states;
  auto keep = [&](const ParamTensor& t) { return t.expert ? o_keep_x : o_keep; };
  const bool gathered = z.weights > 1 || off.weights > 0;  // weights gathered per layer
  const bool reduced = z.gradients > 1 || off.gradients > 0;  // gradients reduce-scattered per layer

  Builder B;
  // Megatron-Core and DeepSpeed gather weights and reduce gradients through buffers they keep
  // (DeepSpeed's ipg buckets and gathered partitions, Megatron's buckets): two of the largest
  // layer's, made once, as the memory model counts them. torchtitan's FSDP2 allocates per layer.
  const bool fsdp2 = torchtitan;
  // FP8 parameters (--fp8-param-gather): the FP8 linears' weights in one byte, in a buffer of their
  // own (Megatron-Core groups its buffers by parameter dtype).
  const bool fp8_params = lm.options.fp8_params;
  if (!fsdp2) {
    double p_max = 0, w_max = 0;
    for (const auto& ch : chunks)
      for (const auto& s : ch) {
        p_max = std::max(p_max, s.params);
        w_max = std::max(w_max, weight_bytes(s.tensors, false, wb, fp8_params) +
                                    weight_bytes(s.tensors, true, wb, fp8_params));
      }
    if (gathered) B.alloc(2 * w_max);
    if (reduced) B.alloc(2 * gb * p_max);
  }
  // Model state. torchtitan (FSDP2) keeps one sharded tensor per parameter; Megatron-Core and
  // DeepSpeed keep flat buffers (Megatron's DDP grad buffer, the distributed optimizer's param
  // buffer, DeepSpeed's flat partitions).
  std::vector<ParamTensor> all_tensors;
  for (const auto& ch : chunks)
    for (const auto& s : ch) all_tensors.insert(all_tensors.end(), s.tensors.begin(), s.tensors.end());
  const double stage_params = sum(all_tensors);
  const double stage_experts = sum(all_tensors, true);
  if (torchtitan) {
    for (const auto& t : all_tensors) B.alloc(w_per * t.n);
  } else {
    // Weights: w_per / wb of each byte the parameters take (wb each, FP8 parameters one).
    const double w_keep = (1 - off.weights) / z.weights, w_keep_x = (1 - off.weights) / zx.weights;
    const double fp8_dense = fp8_params ? sum_fp8(all_tensors, false) : 0, fp8_exp = fp8_params ? sum_fp8(all_tensors, true) : 0;
    B.alloc(w_per * (stage_params - stage_experts - fp8_dense));
    if (fp8_dense > 0) B.alloc(w_keep * fp8_dense);
    B.alloc(g_per * (stage_params - stage_experts));  // Megatron's grad buffer (ZeRO-2/3: the shard DeepSpeed keeps)
    if (stage_experts > 0) {  // Megatron's expert-parallel buffers
      B.alloc(w_per_x * (stage_experts - fp8_exp));
      if (fp8_exp > 0) B.alloc(w_keep_x * fp8_exp);
      B.alloc(g_per_x * stage_experts);
    }
  }
  // The fp32 master copy: per parameter (Megatron's distributed optimizer shards each); DeepSpeed flat.
  if (master > 0 && job.engine() != spec::Engine::kDeepSpeed)
    for (const auto& t : all_tensors) B.alloc(master * keep(t) * t.n);
  else if (master > 0)
    B.alloc(master * o_keep * stage_params);
  // cuBLAS and cuBLASLt workspaces (through the caching allocator since PyTorch 1.11).
  B.alloc(job.cluster().gpu.blas_workspace_bytes);
  B.alloc(job.cluster().gpu.blas_workspace_bytes);
  // The all-gather dispatcher's global memory buffer (Tensor::external), made by the first MoE
  // layer and kept.
  if (l > nd) {
    const double ext = sym::evaluate_or_zero(lm.block.external_bytes(), b);
    if (ext > 0) B.alloc(ext);
  }
  // FP8 training with Transformer Engine: each FP8 linear's weight in FP8, row- and column-wise
  // (one byte per parameter each), made on the first micro-batch and kept for the iteration.
  if (lm.options.fp8 && lm.options.fp8_keeps_fp8_inputs)
    for (int64_t j = 0; j < l; ++j)
      for (const auto& op : (j < nd ? lm.dense_block : lm.block).ops)
        if (op.fp8) {
          const double n = sym::evaluate_or_zero(op.params, b);
          if (!fp8_params) B.alloc(n);  // an FP8 parameter is its own row-wise copy
          B.alloc(n);
        }

  // Per-layer gathers and gradient reduction (FSDP2's pattern, docs/memory-model.md): the gathered
  // flat buffer lives on the all-gather stream until the next gather, each parameter's unsharded
  // copy on the compute stream until the layer is done; the reduce-scatter input (the layer's
  // gradients in grad_dtype) on the reduce-scatter stream until the next reduce-scatter.
  int64_t gather_flat = 0, rs_input = 0;
  auto unshard = [&](const StageLayer& s, std::vector<int64_t>& unsharded) {
    if (!fsdp2 || !gathered || s.params <= 0) return;
    int64_t flat = B.alloc(wb * s.params, kAllGatherStream);
    B.free(gather_flat);
    gather_flat = flat;
    for (const auto& t : s.tensors) unsharded.push_back(B.alloc(wb * t.n));
  };
  auto reshard = [&](std::vector<int64_t>& unsharded) {
    for (auto& id : unsharded) B.free(id);
    unsharded.clear();
  };
  // Sharded gradients made by the first backward of a layer (torchtitan: the reduce-scatter output;
  // DeepSpeed/Megatron flat buffers were made up front).
  std::vector<std::vector<int64_t>> grad_of(chunks.size());
  for (size_t c = 0; c < chunks.size(); ++c) grad_of[c].assign(chunks[c].size(), 0);
  auto reduce = [&](const StageLayer& s, int64_t& grad) {
    if (s.params <= 0) return;
    if (!reduced || !fsdp2) {
      if (fsdp2 && grad == 0) grad = B.alloc(g_per * s.params);  // param.grad, first micro-batch
      return;
    }
    // Weight gradients of the layer (unsharded, training precision), copied into the reduce input.
    std::vector<int64_t> wgrads;
    for (const auto& t : s.tensors) wgrads.push_back(B.alloc(wb * t.n));
    int64_t in = B.alloc(gb * s.params, kReduceScatterStream);
    for (auto& id : wgrads) B.free(id);
    if (grad == 0) {
      grad = B.alloc(g_per * s.params, kReduceScatterStream);
    } else {
      int64_t out = B.alloc(g_per * s.params, kReduceScatterStream);
      B.free(out);  // accumulated into the sharded gradient
    }
    B.free(rs_input);
    rs_input = in;
  };

  const int64_t G = p.grad_accum_steps;
  // The first micro-batches of the schedule: past its warm-up the pattern repeats.
  const int64_t mbs = std::min<int64_t>(G, v == 1 ? p.pp - stage + 2 : 2 * p.pp);
  const auto order = sim::stage_schedule(static_cast<int>(p.pp), stage, mbs, v);  // Megatron's (interleaved) 1F1B
  const double tokens_bytes = 8.0 * p.micro_batch_size * tr.seq_length;
  const double boundary_bytes = sym::evaluate_or_zero(lm.block.tensors[static_cast<size_t>(lm.block.input)].bytes, b);

  std::vector<int64_t> optimizer_states;
  for (int it = 0; it < iterations; ++it) {
    // Live per (micro-batch, chunk): the layer instances between their forward and backward.
    std::unordered_map<int64_t, std::vector<Instance>> live;
    std::unordered_map<int64_t, int64_t> loss;
    for (const sim::ScheduleStep& pass : order) {
      const auto& ch = chunks[static_cast<size_t>(pass.chunk)];
      const int64_t key = pass.micro_batch * v + pass.chunk;
      const bool has_emb = first && pass.chunk == 0, has_head = last && pass.chunk == v - 1;
      if (pass.forward) {
        auto& inst = live[key];
        inst.resize(ch.size());
        // The input: token ids, or the activation received from the previous stage.
        int64_t x = B.alloc(has_emb ? tokens_bytes : boundary_bytes);
        for (size_t j = 0; j < ch.size(); ++j) {
          std::vector<int64_t> unsharded;
          unshard(ch[j], unsharded);
          inst[j].trace = ch[j].trace;
          x = forward(B, inst[j], x);
          // torchtitan keeps the last block gathered for the backward that follows at once.
          reshard(unsharded);
        }
        if (has_head)
          loss[key] = x;
        else
          B.free(x);  // sent to the next stage, then freed (Megatron's deallocate_output_tensor)
        continue;
      }
      auto& inst = live[key];
      int64_t dy = has_head ? B.alloc(4) : B.alloc(boundary_bytes);  // the loss's or the received gradient
      for (size_t j = ch.size(); j-- > 0;) {
        std::vector<int64_t> unsharded;
        unshard(ch[j], unsharded);
        dy = backward(B, inst[j], dy);
        reshard(unsharded);
        reduce(ch[j], grad_of[static_cast<size_t>(pass.chunk)][j]);
      }
      B.free(dy);  // sent to the previous stage (none from the embedding)
      if (has_head) B.free(loss[key]);
      live.erase(key);
    }
    B.free(gather_flat);
    B.free(rs_input);
    // The optimizer step: AdamW's moments (and SGD's momentum) are made by the first step, one per
    // parameter tensor (a flat partition under DeepSpeed).
    if (it == 0) {
      const double states = K - master;
      const int per = static_cast<int>(std::lround(states / 4));
      for (int k = 0; k < per; ++k) {
        if (job.engine() == spec::Engine::kDeepSpeed)
          optimizer_states.push_back(B.alloc(4 * o_keep * stage_params));
        else
          for (const auto& t : all_tensors) optimizer_states.push_back(B.alloc(4 * keep(t) * t.n));
      }
    }
    // torchtitan's optimizer.zero_grad() sets gradients to None: their memory returns to the cache.
    if (torchtitan)
      for (auto& g : grad_of)
        for (auto& id : g) B.free(id);
  }

  AllocationTrace t;
  t.events = B.take();
  t.iterations = iterations;
  t.micro_batches = mbs;
  return t;
}

}  // namespace mist::analysis
