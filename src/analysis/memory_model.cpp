#include "analysis/memory_model.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "analysis/overheads.hpp"
#include "analysis/prepared_job.hpp"
#include "analysis/reserved_memory.hpp"
#include "core/units.hpp"
#include "graph/lower.hpp"
#include "sim/pipeline_sim.hpp"

namespace mist::analysis {

namespace {

using sym::Expr;

Expr S(const char* name) { return Expr::symbol(name); }

const std::vector<std::string> kShapeSymbols = {"s", "h", "a", "g", "f", "V"};
const std::vector<std::string> kKnobSymbols = {
    "b", "t", "cp", "ep", "etp", "d", "l", "c", "p", "ph", "zw", "zg", "zo", "zwx", "zgx", "zox", "wo", "go", "oo", "ao",
    "E", "H", "D", "T", "Q", "W", "G", "O", "A", "C_ctx", "C_blas", "C_nccl"};

// Expected waste of rounding one allocation up to the caching allocator's 2 MiB granularity.
constexpr double kRoundingBytesPerAllocation = units::kMiB;

Expr bound(const Expr& e, const sym::Bindings& dims) { return sym::substitute(e, dims); }

bool is_zero(const Expr& e) { return e.is_constant() && e.constant_value() == 0; }

}  // namespace

int optimizer_bytes_per_param(const spec::TrainingSpec& t) {
  const int master = t.mixed_precision() ? 4 : 0;
  return t.optimizer == spec::Optimizer::kAdamW ? master + 8 : master + 4;
}

Result<StageMemoryModel> build_stage_memory_model(const graph::LoweredModel& lm,
                                                  const spec::TrainingSpec& training,
                                                  plan::Recompute recompute) {
  StageMemoryModel M;
  const auto& dims = lm.dims;
  M.block = graph::analyze_activations(lm.block, dims);
  const bool dense = lm.dense_blocks > 0;
  if (dense) M.dense_block = graph::analyze_activations(lm.dense_block, dims);
  M.embedding = graph::analyze_activations(lm.embedding, dims);
  M.head = graph::analyze_activations(lm.head, dims);
  // Unbound copies keep s, h, ... in the printed formulas.
  const auto block_free = graph::analyze_activations(lm.block, {});
  const auto dense_free = dense ? graph::analyze_activations(lm.dense_block, {}) : graph::LayerActivations{};
  const auto emb_free = graph::analyze_activations(lm.embedding, {});
  const auto head_free = graph::analyze_activations(lm.head, {});
  const bool selective = recompute == plan::Recompute::kSelective;

  const Expr l = S("l"), c = S("c"), p = S("p"), ph = S("ph"), E = S("E"), H = S("H"), T = S("T");
  // D: the dense blocks among the stage's l (a mixture of experts' first blocks, all on stage 0);
  // the stage's first c blocks are the recomputed ones (Megatron's --recompute-method block), the
  // dense ones first: cD = min(c, D) of them, c − cD MoE blocks. Without dense blocks D is 0.
  const Expr D = dense ? S("D") : Expr(0.0);
  const Expr cD = dense ? sym::min(c, D) : Expr(0.0);
  const Expr has_dense = dense ? sym::min(D, Expr(1.0)) : Expr(0.0);
  const Expr zw = S("zw"), zg = S("zg"), zo = S("zo");
  const Expr wo = S("wo"), go = S("go"), oo = S("oo"), ao = S("ao");
  const Expr wb = Expr(spec::dtype_bytes(training.precision));
  const Expr gb = Expr(spec::dtype_bytes(training.grad_dtype));
  const Expr K = Expr(optimizer_bytes_per_param(training));

  // Parameters held by one GPU of the stage, before ZeRO sharding. A mixture of experts' expert
  // weights (P_exp) are sharded by ZeRO over the expert data-parallel group (zwx, zgx, zox), the
  // rest over the data-parallel group.
  const Expr P_blk = lm.block.params(), P_emb = lm.embedding.params();
  const Expr P_dns = dense ? lm.dense_block.params() : Expr(0.0);
  const Expr P_head = lm.head.params() + T * lm.embedding_copy_params;
  const Expr P_stage = (l - D) * P_blk + D * P_dns + E * P_emb + H * P_head;
  const Expr P_blkx = lm.block.expert_params();
  const bool experts = !is_zero(P_blkx);
  // The head's multi-token prediction blocks hold expert weights too (of the model's last kind).
  const Expr P_exp = (l - D) * P_blkx + H * lm.head.expert_params();
  // The FP8 linears' weights of a block whose FP8 copies Transformer Engine caches (0 otherwise).
  const bool fp8_copies = lm.options.fp8 && lm.options.fp8_keeps_fp8_inputs;
  const Expr P_fp8 = fp8_copies ? lm.block.fp8_params() : Expr(0.0);
  const Expr P_fp8_dns = fp8_copies && dense ? lm.dense_block.fp8_params() : Expr(0.0);
  const Expr P_fp8_head = fp8_copies ? lm.head.fp8_params() : Expr(0.0);  // multi-token prediction blocks
  // bytes·P/z for the dense share, bytes·P_exp/zx for the experts'; its formula in words.
  auto sharded = [&](const Expr& bytes, const Expr& z, const Expr& zx, const Expr& kept) {
    return experts ? bytes * ((P_stage - P_exp) / z + P_exp / zx) * kept : bytes * P_stage * kept / z;
  };
  // FP8 parameters (--fp8-param-gather): the stage's FP8 linear weights (P8_stage, the experts' P8_exp
  // among them) are kept in one byte instead of wb: the weights term takes (wb - 1)·P8 off, sharded
  // as the rest. The layer-wise sizes of the gathered buffers do the same.
  const bool fp8_params = lm.options.fp8_params;
  const Expr P8_stage = fp8_params ? (l - D) * lm.block.fp8_params() +
                                         (dense ? D * lm.dense_block.fp8_params() : Expr(0.0)) + H * lm.head.fp8_params()
                                   : Expr(0.0);
  const Expr P8_exp = fp8_params ? (l - D) * lm.block.fp8_expert_params() + H * lm.head.fp8_expert_params() : Expr(0.0);
  const Expr w_off = Expr(static_cast<double>(spec::dtype_bytes(training.precision) - 1));
  auto fp8_saving = [&](const Expr& kept) {
    return !fp8_params ? Expr(0.0)
           : experts   ? w_off * ((P8_stage - P8_exp) / zw + P8_exp / S("zwx")) * kept
                       : w_off * P8_stage * kept / zw;
  };
  auto gathered = [&](const graph::Layer& L) {
    return fp8_params ? L.params() - (w_off / wb) * L.fp8_params() : L.params();
  };

  // Activations of one micro-batch on this stage (formula form and bound form).
  const Expr A_blk = selective ? block_free.saved_selective : block_free.saved;
  const Expr A_dns = !dense ? Expr(0.0) : selective ? dense_free.saved_selective : dense_free.saved;
  const Expr A_in = block_free.input;
  // The head's multi-token prediction blocks recompute their attention cores under selective
  // recompute as the model's blocks do (never fully: Megatron's block method leaves them out).
  const Expr A_head = selective ? head_free.saved_selective : head_free.saved;
  const Expr A_mb = (l - D - (c - cD)) * A_blk + (D - cD) * A_dns + c * A_in + E * emb_free.saved + H * A_head;

  // Transient bytes above the saved ones: the worst layer's forward or backward live set minus
  // what that layer keeps anyway. A fully recomputed block keeps only its input and rebuilds the
  // rest in its backward (liveness' bwd_peak_recomputed); min(c, 1) is 1 when the stage
  // recomputes any block.
  const Expr A_blk_b = selective ? M.block.saved_selective : M.block.saved;
  const Expr fwd_blk_b = selective ? M.block.fwd_peak_selective : M.block.fwd_peak;
  const Expr bwd_blk_b = selective ? M.block.bwd_peak_selective : M.block.bwd_peak;
  // A layer's forward peak leaves its input out (liveness.hpp), which is live all the while (the
  // residual reads it) and which its saved bytes count when an op keeps it: the forward's live set
  // is input + fwd_peak. (The CPU executor's context-parallel blocks, whose ring attention makes
  // the forward the peak, measured the input missing before, 2026-12-02.)
  const Expr X_blk = sym::max(sym::max(M.block.input + fwd_blk_b, bwd_blk_b) - A_blk_b,
                              sym::min(c - cD, Expr(1.0)) * (M.block.bwd_peak_recomputed - M.block.input));
  Expr X_dns(0.0);
  if (dense) {
    const auto& Md = M.dense_block;
    const Expr saved = selective ? Md.saved_selective : Md.saved;
    const Expr fwd = selective ? Md.fwd_peak_selective : Md.fwd_peak;
    const Expr bwd = selective ? Md.bwd_peak_selective : Md.bwd_peak;
    X_dns = has_dense * sym::max(sym::max(Md.input + fwd, bwd) - saved,
                                 sym::min(cD, Expr(1.0)) * (Md.bwd_peak_recomputed - Md.input));
  }
  const Expr X_head = selective ? H * (sym::max(M.head.input + M.head.fwd_peak_selective, M.head.bwd_peak_selective) -
                                       M.head.saved_selective)
                                : H * (sym::max(M.head.input + M.head.fwd_peak, M.head.bwd_peak) - M.head.saved);
  const Expr X_emb = E * (sym::max(M.embedding.input + M.embedding.fwd_peak, M.embedding.bwd_peak) - M.embedding.saved);

  const Expr P_max = sym::max({bound(gathered(lm.block), dims), has_dense * (dense ? bound(gathered(lm.dense_block), dims) : Expr(0.0)),
                               E * bound(P_emb, dims), H * bound(P_head, dims)});
  const double n_saved = M.block.saved_tensor_count;
  const double n_saved_dns = dense ? M.dense_block.saved_tensor_count : 0.0;

  const int wbi = spec::dtype_bytes(training.precision), gbi = spec::dtype_bytes(training.grad_dtype);
  const int Ki = optimizer_bytes_per_param(training);
  M.quantities = {
      {"P_blk", "parameters of one block on one GPU", P_blk, false},
      {"P_emb", "parameters of the embedding on one GPU", P_emb, false},
      {"P_head", "parameters of the final norm, LM head and multi-token prediction depths on one GPU (T: the word "
                 "embedding's copy on the last stage)", P_head, false},
      {"P_stage", "parameters of the stage on one GPU", P_stage, false},
      {"A_blk", selective ? "activations one block saves for backward (selective recompute)"
                          : "activations one block saves for backward",
       A_blk},
      {"A_in", "input of a block: all a fully recomputed block keeps", A_in},
      {"A_emb", "activations the embedding saves", emb_free.saved},
      {"A_head", lm.options.mtp_layers > 0 ? "activations the final norm, the multi-token prediction depths, the LM head and the losses save"
                                            : "activations the final norm, LM head and loss save",
       A_head},
      {"A_mb", "activations of one micro-batch on the stage", A_mb},
      {"X_blk", "a block's live bytes above what it keeps, worst of forward/backward", X_blk},
      {"X_head", "the same for the head (logits and their fp32 copy)", X_head},
  };
  if (experts)
    M.quantities.insert(M.quantities.begin() + 4,
                        {"P_exp", "expert weights of the stage on one GPU (E/ep experts, 1/etp of each)", P_exp, false});
  auto n = [](int v) { return std::to_string(v); };
  auto shown = [&](const std::string& bytes, const std::string& off, const std::string& z) {
    return experts ? bytes + "·((P_stage - P_exp)/" + z + " + P_exp/" + z + "x)·(1 - " + off + ")"
                   : bytes + "·P_stage·(1 - " + off + ")/" + z;
  };
  M.terms = {
      {"weights",
       fp8_params ? "parameters in training precision, the FP8 linears' in FP8 (--fp8-param-gather), ZeRO-3 "
                    "sharded, minus the offloaded share"
                  : "parameters in training precision, ZeRO-3 sharded, minus the offloaded share",
       !fp8_params ? shown(n(wbi), "wo", "zw")
       : experts   ? shown(n(wbi), "wo", "zw") + " - " + n(wbi - 1) + "·((P8_stage - P8_exp)/zw + P8_exp/zwx)·(1 - wo)"
                   : shown(n(wbi), "wo", "zw") + " - " + n(wbi - 1) + "·P8_stage·(1 - wo)/zw",
       sharded(wb, zw, S("zwx"), 1 - wo) - fp8_saving(1 - wo)},
      {"gradients", "gradients in grad_dtype, sharded by ZeRO-2/3, minus the offloaded share",
       shown(n(gbi), "go", "zg"), sharded(gb, zg, S("zgx"), 1 - go)},
      {"optimizer_states", "optimizer state (fp32 master, moments), sharded by ZeRO-1+, minus offload",
       shown(n(Ki), "oo", "zo"), sharded(K, zo, S("zox"), 1 - oo)},
      {"activations",
       "saved activations of the p micro-batches in flight (the head's of ph), minus the offloaded share",
       "(1 - ao)·(p·(A_mb - H·A_head) + ph·H·A_head)", (1 - ao) * (p * (A_mb - H * A_head) + ph * H * A_head)},
      {"activation_transient",
       "largest live set above the saved activations in one layer's forward or backward "
       "(recompute included)",
       dense ? "max(X_blk, X_dns, X_head, X_emb)" : "max(X_blk, X_head, X_emb)",
       sym::max({X_blk, X_dns, X_head, X_emb})},
      {"weight_buffers", "gathered/prefetched full weights of the largest layer, double-buffered",
       "W·2·" + n(wbi) + (dense ? "·max(P_blk, P_dns, E·P_emb, H·P_head)" : "·max(P_blk, E·P_emb, H·P_head)"),
       S("W") * 2 * wb * P_max},
      {"gradient_buffers", "full gradients of the largest layer before reduce-scatter/offload, double-buffered",
       "G·2·" + n(gbi) + (dense ? "·max(P_blk, P_dns, E·P_emb, H·P_head)" : "·max(P_blk, E·P_emb, H·P_head)"),
       S("G") * 2 * gb * P_max},
      {"offload_buffers", "one block's optimizer state and activations swapped back in",
       "O·" + n(Ki) + "·P_blk/zo + A·ao·A_blk",
       S("O") * K * sym::max(bound(P_blk - P_blkx, dims) / zo + bound(P_blkx, dims) / S("zox"),
                             has_dense * bound(P_dns, dims) / zo) +
           S("A") * ao * sym::max(A_blk, has_dense * A_dns)},
      {"pipeline_buffers", "send and receive buffers of the stage boundary activations",
       "Q·2·A_in", S("Q") * 2 * block_free.output},
      {"blas_workspace", "cuBLAS and cuBLASLt workspaces of the compute stream", "2·C_blas",
       2 * S("C_blas")},
      {"cuda_context", "CUDA driver context and loaded kernel images", "C_ctx", S("C_ctx"), false},
      {"nccl_buffers", "NCCL channel buffers of the TP, DP and PP communicators", "C_nccl",
       S("C_nccl"), false},
      {"allocator_reserve",
       "what PyTorch's caching allocator reserves above the allocated peak: predict replays the "
       "iteration's allocations through its rules (the tuner's estimate: 1 MiB per saved tensor)",
       dense ? "1 MiB·p·(" + n(static_cast<int>(n_saved)) + "·(l - D - c + cD) + " +
                   n(static_cast<int>(n_saved_dns)) + "·(D - cD) + c)"
             : "1 MiB·p·(" + n(static_cast<int>(n_saved)) + "·(l - c) + c)",
       Expr(kRoundingBytesPerAllocation) * p * ((l - D - (c - cD)) * n_saved + (D - cD) * n_saved_dns + c), false},
  };
  // Megatron's global memory buffer, into which the all-gather dispatcher gathers each MoE layer's
  // tokens (Tensor::external): one, sized by the largest request, reused by every layer.
  const Expr X_ext = lm.block.external_bytes();
  if (!is_zero(X_ext)) {
    auto at = std::find_if(M.terms.begin(), M.terms.end(), [](const auto& t) { return t.name == "blas_workspace"; });
    M.terms.insert(at, {"dispatcher_buffer",
                        "the global memory buffer the all-gather dispatcher gathers the tp_ep group's tokens into "
                        "(one for every MoE layer)",
                        "min(l - D, 1)·" + X_ext.str(), sym::min(l - D, Expr(1.0)) * X_ext});
  }
  if (fp8_copies) {
    // After the model state, before the buffers (the order explain prints).
    auto at = std::find_if(M.terms.begin(), M.terms.end(), [](const auto& t) { return t.name == "weight_buffers"; });
    // With FP8 parameters the row-wise copy is the parameter itself; the column-wise one remains.
    const int copies = fp8_params ? 1 : 2;
    const std::string k = std::to_string(copies) + "·";
    M.terms.insert(at, {"fp8_weight_copies",
                        fp8_params ? "column-wise FP8 copies of the FP8 parameters (Transformer Engine's transpose), "
                                     "kept for the iteration"
                                   : "FP8 copies of the FP8 linears' weights, row- and column-wise, kept for the "
                                     "iteration (Transformer Engine)",
                        lm.options.mtp_layers == 0 ? (dense ? k + "((l - D)·P_fp8 + D·P_fp8_dns)" : k + "l·P_fp8")
                        : dense                    ? k + "((l - D)·P_fp8 + D·P_fp8_dns + H·P_fp8_head)"
                                                   : k + "(l·P_fp8 + H·P_fp8_head)",
                        Expr(static_cast<double>(copies)) * ((l - D) * P_fp8 + D * P_fp8_dns + H * P_fp8_head)});
    if (fp8_params)
      M.quantities.insert(M.quantities.begin() + 4,
                          {"P8_stage", "FP8 linear weights of the stage on one GPU (kept in FP8)", P8_stage, false});
    M.quantities.insert(M.quantities.begin() + 4,
                        {"P_fp8", "weights of one block's FP8 linears on one GPU", P_fp8, false});
  }
  std::vector<Expr> all;
  for (const auto& t : M.terms) all.push_back(t.formula);
  M.peak = sym::sum(all);
  M.block_activation = A_blk;
  M.block_activation_recomputed = A_in;
  M.host_bytes = sharded(wb, zw, S("zwx"), wo) - fp8_saving(wo) + sharded(gb, zg, S("zgx"), go) + sharded(K, zo, S("zox"), oo) +
                 ao * (p * (A_mb - H * A_head) + ph * H * A_head);

  M.inputs = kShapeSymbols;
  M.inputs.insert(M.inputs.end(), kKnobSymbols.begin(), kKnobSymbols.end());
  std::vector<Expr> outs = all;
  outs.push_back(M.peak);
  outs.push_back(M.block_activation);
  outs.push_back(M.block_activation_recomputed);
  outs.push_back(M.host_bytes);
  MIST_TRY(M.program, sym::Program::compile(outs, M.inputs));
  return M;
}

double in_flight_micro_batches(const plan::Plan& p, int stage) {
  const double G = static_cast<double>(p.grad_accum_steps);
  const double pp = static_cast<double>(p.pp), i = stage;
  const double v = static_cast<double>(p.virtual_pipeline_stages);
  // The overlapped MoE all-to-alls (plan.overlap_moe_a2a) run a forward beside a backward: one more
  // micro-batch (one more warm-up chunk when interleaved: Megatron's combined 1F1B,
  // schedules.py) is built before the oldest is released.
  const double extra = p.overlap_moe_a2a ? 1.0 : 0.0;
  if (v <= 1) return std::min(pp - i + extra, G);
  if (plan::uneven_chunks(p)) {
    // Chunks of unequal size: walk Megatron's interleaved order and keep the most blocks in
    // flight, in micro-batches of the stage's blocks. Past its warm-up (under 2·pp micro-batches)
    // the order repeats every pp, so 4·pp micro-batches (a multiple of pp, as G is) reach the peak.
    const auto layers = plan::stage_chunk_layers(p, static_cast<size_t>(stage));
    const double l = static_cast<double>(p.stages.at(static_cast<size_t>(stage)).num_layers);
    double held = 0, most = 0;
    for (const auto& s : sim::stage_schedule(static_cast<int>(p.pp), stage, std::min(p.grad_accum_steps, 4 * p.pp),
                                             p.virtual_pipeline_stages)) {
      held += static_cast<double>(s.forward ? layers[static_cast<size_t>(s.chunk)] : -layers[static_cast<size_t>(s.chunk)]);
      most = std::max(most, held);
    }
    // The overlapped all-to-alls' one more warm-up chunk: the stage's largest.
    most += extra * static_cast<double>(*std::max_element(layers.begin(), layers.end()));
    return l > 0 ? most / l : 0;
  }
  // Interleaved 1F1B (Narayanan et al. SC21 §2.2; Megatron's warm-up count): rank i runs
  // (pp - i - 1)·2 + (v - 1)·pp warm-up chunks, then holds one more, each chunk 1/v of the stage.
  const double chunks = std::min((pp - i - 1) * 2 + (v - 1) * pp + 1 + extra, G * v);
  return chunks / v;
}

double head_in_flight_micro_batches(const plan::Plan& p) {
  // The last stage runs a micro-batch's head in its last model chunk and that chunk's backward
  // next: 1F1B holds min(1, G) there, and so does interleaved 1F1B, whose warm-up on the last rank
  // ((v - 1)·pp chunk-forwards) stops before the last chunk and whose steady state pairs each
  // last-chunk forward with a last-chunk backward. The overlapped all-to-alls hold one more.
  return std::min(1.0 + (p.overlap_moe_a2a ? 1.0 : 0.0), static_cast<double>(p.grad_accum_steps));
}

SettingKnobs::SettingKnobs(const plan::Plan& layout, double in_flight, double nccl_bytes)
    : grad_dp_(plan::grad_dp(layout)),
      expert_dp_(plan::expert_dp(layout)),
      in_flight_(in_flight),
      head_in_flight_(head_in_flight_micro_batches(layout)),
      micro_batch_(static_cast<double>(layout.micro_batch_size)),
      nccl_bytes_(nccl_bytes) {}

std::array<double, kSettingKnobs.size()> SettingKnobs::operator()(const plan::StagePlan& st) const {
  const plan::ShardFactors z = plan::shard_factors(st.zero, grad_dp_);
  const plan::ShardFactors zx = plan::shard_factors(st.zero, expert_dp_);
  const auto& o = st.offload;
  return {static_cast<double>(st.num_layers),
          static_cast<double>(st.ckpt_layers),
          z.weights,
          z.gradients,
          z.optimizer_states,
          o.weights,
          o.gradients,
          o.optimizer_states,
          o.activations,
          z.weights > 1 || o.weights > 0 ? 1.0 : 0.0,  // W: weights gathered or swapped per layer
          z.gradients > 1 || o.gradients > 0 ? 1.0 : 0.0,
          o.optimizer_states > 0 ? 1.0 : 0.0,
          o.activations > 0 ? 1.0 : 0.0,
          in_flight_,
          micro_batch_,
          static_cast<double>(grad_dp_),
          nccl_bytes_,
          zx.weights,
          zx.gradients,
          zx.optimizer_states,
          head_in_flight_};
}

std::array<double, kSettingKnobs.size()> setting_knob_values(const plan::Plan& layout, const plan::StagePlan& st,
                                                             double in_flight, double nccl_bytes) {
  return SettingKnobs(layout, in_flight, nccl_bytes)(st);
}

void bind_parallel_degrees(sym::Bindings& at, const plan::Plan& p) {
  at["t"] = static_cast<double>(p.tp);
  at["cp"] = static_cast<double>(p.cp);
  at["ep"] = static_cast<double>(p.ep);
  at["etp"] = static_cast<double>(p.etp);
}

sym::Bindings stage_knobs(const graph::LoweredModel& lm, const spec::ModelSpec& m, const spec::ClusterSpec& c,
                          const plan::Plan& p, const plan::StagePlan& st, int index, double nccl_bytes) {
  const bool first = index == 0, last = index + 1 == p.pp;
  sym::Bindings k = lm.dims;
  const auto values = setting_knob_values(p, st, in_flight_micro_batches(p, index), nccl_bytes);
  for (size_t i = 0; i < kSettingKnobs.size(); ++i) k[kSettingKnobs[i]] = values[i];
  bind_parallel_degrees(k, p);
  k["E"] = first ? 1.0 : 0.0;
  k["H"] = last ? 1.0 : 0.0;
  k["D"] = static_cast<double>(plan::dense_blocks(m, index));
  // The last stage's copy of the word embedding (the tied LM head's, or multi-token prediction's).
  k["T"] = last && p.pp > 1 && !is_zero(lm.embedding_copy_params) ? 1.0 : 0.0;
  k["Q"] = p.pp > 1 ? 1.0 : 0.0;
  k["C_ctx"] = c.gpu.cuda_context_bytes;
  k["C_blas"] = c.gpu.blas_workspace_bytes;
  return k;
}

Result<MemoryPrediction> stage_memory(const PreparedJob& job, const plan::Plan& p) {
  const auto& m = job.model();
  const auto& c = job.cluster();
  MIST_TRY(const Lowering* lowering, job.lowering(p));
  const graph::LoweredModel& lm = lowering->model;
  const StageMemoryModel& M = lowering->memory;

  const double nccl = nccl_buffer_bytes(p, c, uses_expert_groups(p, m.is_moe()),
                                        job.training().moe_dispatcher == spec::MoeDispatcher::kAllGather);
  const size_t rows = p.stages.size();
  const size_t n_in = M.inputs.size();
  std::vector<double> in(n_in * rows), out(M.program.num_outputs() * rows);
  std::vector<sym::Bindings> knobs(rows);
  for (size_t r = 0; r < rows; ++r) {
    sym::Bindings k = stage_knobs(lm, m, c, p, p.stages[r], static_cast<int>(r), nccl);
    for (size_t i = 0; i < n_in; ++i) in[i * rows + r] = k.at(M.inputs[i]);
    knobs[r] = std::move(k);
  }
  M.program.evaluate(in, rows, out);

  MemoryPrediction pred;
  pred.fits = true;
  const size_t nt = M.terms.size();
  double host_max = 0;
  for (size_t r = 0; r < rows; ++r) {
    StageMemory s;
    s.index = static_cast<int>(r);
    s.num_layers = p.stages[r].num_layers;
    s.ckpt_layers = p.stages[r].ckpt_layers;
    s.in_flight = knobs[r].at("p");
    for (size_t i = 0; i < nt; ++i) {
      double v = out[i * rows + r];
      s.terms.push_back({M.terms[i].name, M.terms[i].description, M.terms[i].display,
                         M.terms[i].formula.str(), v});
      if (M.terms[i].allocated) s.peak_allocated_bytes += v;
    }
    s.peak_bytes = out[nt * rows + r];
    // Inputs are bounded one by one, but their product can still be absurd (a 1e9 batch of 1e7
    // tokens): refuse to report memory beyond 1 EiB rather than print a meaningless number.
    if (!std::isfinite(s.peak_bytes) || s.peak_bytes > units::kMaxBytes)
      return fail("plan", fmt::format("stage {} would need {:.3g} bytes per GPU, beyond any real machine: "
                                      "check micro_batch_size, seq_length and the model sizes",
                                      r, s.peak_bytes));
    s.block_activation_bytes = out[(nt + 1) * rows + r];
    s.block_activation_bytes_recomputed = out[(nt + 2) * rows + r];
    s.host_bytes = out[(nt + 3) * rows + r];
    s.capacity_bytes = c.gpu.memory_bytes;
    s.usable_bytes = job.usable_memory_bytes();
    // The allocator's reserve, replayed on the iteration's allocation trace, replaces the
    // symbolic estimate; what lives outside the allocator (context, NCCL) stays.
    size_t reserve_term = 0;
    while (M.terms[reserve_term].name != "allocator_reserve") ++reserve_term;
    const double outside = s.peak_bytes - s.peak_allocated_bytes - out[reserve_term * rows + r];
    s.estimated_peak_bytes = s.peak_bytes;
    ReservedMemory rm;
    rm.reserved = s.peak_allocated_bytes + out[reserve_term * rows + r];
    rm.out_of_memory = rm.limited = s.peak_bytes > s.usable_bytes;
    if (job.allocator_replay()) {
      MIST_TRY(rm, reserved_memory(job, p, static_cast<int>(r), s.peak_allocated_bytes, s.usable_bytes - outside));
    }
    s.expandable_segments = rm.expandable_segments;
    // A plan that fits only by the allocator releasing its cache reserves what the GPU leaves it.
    s.reserved_bytes = rm.limited && !rm.out_of_memory ? rm.limited_reserved : rm.reserved;
    s.replayed_allocated_bytes = rm.trace_allocated;
    s.allocator_retries = rm.alloc_retries;
    s.fits = !rm.limited || !rm.out_of_memory;
    s.terms[reserve_term].bytes = rm.reserved - s.peak_allocated_bytes;
    if (job.allocator_replay())
      s.terms[reserve_term].display = "reserved - allocated, replayed (the search's estimate: " +
                                      s.terms[reserve_term].display + ")";
    s.peak_bytes = s.reserved_bytes + outside;
    for (const auto& q : M.quantities) {
      const double v = sym::evaluate_or_zero(q.formula, knobs[r]);
      s.quantities.push_back({q.name, q.description, q.name, q.formula.str(), v, q.is_bytes});
    }
    s.knobs = knobs[r];
    pred.fits = pred.fits && s.fits;
    host_max = std::max(host_max, s.host_bytes);
    pred.stages.push_back(std::move(s));
  }
  // A node hosts gpus_per_node GPUs; bound their host use by the busiest stage's.
  pred.host_bytes_per_node = host_max * static_cast<double>(c.gpus_per_node);
  pred.host_capacity_bytes = c.host_memory_bytes;
  pred.host_fits = pred.host_bytes_per_node <= pred.host_capacity_bytes;
  pred.fits = pred.fits && pred.host_fits;
  return pred;
}

}  // namespace mist::analysis
