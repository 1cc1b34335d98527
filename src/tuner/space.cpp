#include "tuner/space.hpp"

#include <algorithm>
#include <numeric>

namespace mist::tuner {

namespace {

// Context parallelism as engine `e` runs it (EngineCaps::cp).
void restrict_cp(SearchSpace& s, engines::Engine e) {
  const engines::CpCaps& caps = engines::engine_caps(e).cp;
  s.cp_comm.clear();
  for (auto c : {plan::CpComm::kRing, plan::CpComm::kAllToAll, plan::CpComm::kAllGather, plan::CpComm::kA2aP2p})
    if (caps.runs(c)) s.cp_comm.push_back(c);
  s.cp_with_tp = caps.with_tp;
  s.cp_with_pp = caps.with_pp;
  s.cp_with_grouped_kv = caps.grouped_kv;
}

}  // namespace

Result<SearchSpace> named_space(const std::string& name) {
  SearchSpace s;
  s.name = name;
  if (name == "mist") return s;
  if (name == "megatron") {
    s.zero = {0, 1};  // --use-distributed-optimizer off/on
    s.virtual_stages = {1};  // the plain sweep; --engine megatron also tries interleaving
    s.weight_offload = s.grad_offload = s.opt_offload = s.act_offload = {0};
    s.uniform_stage_settings = true;
    s.uniform_split = true;
    return s;
  }
  if (name == "deepspeed") {
    s.virtual_stages = {1};
    restrict_cp(s, engines::Engine::kDeepSpeed);  // DeepSpeed-Ulysses (--ds-sequence-parallel-size)
    s.tp = {1};
    s.max_pp = 1;
    s.recompute = {plan::Recompute::kNone};
    s.ckpt_all_or_nothing = true;
    s.weight_offload = {0, 1};  // offload_param (ZeRO-3 only)
    s.weight_offload_needs_zero3 = true;
    s.grad_offload = {0};
    s.opt_offload = {0, 1};     // offload_optimizer
    s.act_offload = {0};
    s.uniform_stage_settings = true;
    s.uniform_split = true;
    return s;
  }
  return fail("--space", "must be one of mist, megatron, deepspeed; got \"" + name + "\"");
}

SearchSpace engine_space(engines::Engine e) {
  using engines::Engine;
  SearchSpace s;
  s.name = engines::to_string(e);
  s.uniform_stage_settings = true;  // one set of flags for every stage
  s.uniform_split = true;
  s.weight_offload = s.grad_offload = s.act_offload = {0};
  s.virtual_stages = {1};
  switch (e) {
    case Engine::kMegatron:
      // --use-distributed-optimizer, --recompute-num-layers, --optimizer-offload-fraction, and
      // uneven first/last stages (--decoder-first/last-pipeline-num-layers).
      // --num-layers-per-virtual-stage / --num-virtual-stages-per-pipeline-rank: interleaved 1F1B.
      s.zero = {0, 1};
      s.virtual_stages = {1, 2, 4};
      s.split_rule = SplitRule::kMegatronFirstLast;
      s.opt_offload = {0, 0.25, 0.5, 0.75, 1};
      break;
    case Engine::kDeepSpeed:
      // ZeRO stages with offload_optimizer / offload_param (ZeRO-3), Megatron-DeepSpeed for TP/PP,
      // and its all-or-nothing activation checkpointing.
      s.opt_offload = {0, 1};
      s.weight_offload = s.grad_offload = {0, 1};
      s.weight_offload_needs_zero3 = true;
      s.ckpt_all_or_nothing = true;
      s.recompute = {plan::Recompute::kNone};
      // The pipeline engine partitions the blocks itself and runs ZeRO 0 or 1 only (its caps).
      s.split_rule = SplitRule::kDeepSpeedPartition;
      break;
    case Engine::kTorchtitan:
      // FSDP2 (ZeRO-3, or ZeRO-2 without resharding after forward; ZeRO-1 under PP), with all its
      // state on the CPU or none; activation checkpointing none, selective or full.
      s.split_rule = SplitRule::kTorchtitanGenerated;
      s.weight_offload = s.grad_offload = s.opt_offload = {0, 1};
      s.ckpt_all_or_nothing = true;
      break;
  }
  // The ZeRO levels the engine runs without and with pipeline parallelism.
  s.zero_alone = engines::engine_caps(e).zero_levels;
  s.zero_with_pp = engines::engine_caps(e).zero_levels_with_pp;
  restrict_cp(s, e);
  return s;
}

std::vector<std::pair<int64_t, int64_t>> expert_degrees(const SearchSpace& space, const spec::ModelSpec& m,
                                                        int64_t tp, int64_t cp, int64_t dp) {
  if (!m.is_moe()) return {{1, 1}};
  const int64_t tp_cp = tp * cp;
  if (!space.tune_experts) {
    if (plan::check_experts(m, tp_cp, dp, 1, tp)) return {{1, tp}};
    return {};
  }
  std::vector<std::pair<int64_t, int64_t>> out;
  const std::vector<int64_t> etps = tp > 1 ? std::vector<int64_t>{1, tp} : std::vector<int64_t>{1};
  for (int64_t etp : etps) {
    for (int64_t ep = 1; ep <= m.num_experts; ++ep)
      if (m.num_experts % ep == 0 && plan::check_experts(m, tp_cp, dp, ep, etp)) out.emplace_back(ep, etp);
  }
  return out;
}

std::vector<plan::CpComm> cp_exchanges(const SearchSpace& space, const spec::ModelSpec& m, const spec::TrainingSpec& t,
                                       int64_t cp, int64_t tp, int64_t a2a) {
  if (cp == 1) return {plan::CpComm::kRing};
  std::vector<plan::CpComm> out;
  for (auto comm : space.cp_comm) {
    if (comm == plan::CpComm::kA2aP2p && (a2a < 2 || a2a >= cp)) continue;
    if (plan::check_cp(m, t, cp, comm, tp, a2a)) out.push_back(comm);
  }
  return out;
}

int64_t hierarchical_a2a_size(const spec::ClusterSpec& c, int64_t tp, int64_t cp) {
  return std::gcd(cp, std::max<int64_t>(1, c.nvlink_gpus() / std::max<int64_t>(1, tp)));
}

std::vector<int64_t> cp_degrees(const SearchSpace& space, const spec::ModelSpec& m, const spec::TrainingSpec& t,
                                int64_t gpus, int64_t tp, int64_t pp) {
  std::vector<int64_t> out;
  for (int64_t cp : space.cp) {
    if (cp < 1 || (gpus / tp) % cp) continue;
    if (cp > 1) {
      if (t.seq_length / cp < space.min_cp_tokens) continue;
      if ((tp > 1 && !space.cp_with_tp) || (pp > 1 && !space.cp_with_pp)) continue;
      if (m.num_kv_heads != m.num_heads && !space.cp_with_grouped_kv) continue;
      if (cp_exchanges(space, m, t, cp, tp).empty()) continue;
    }
    if (tp > 1 && (t.seq_length / cp) % tp) continue;  // sequence parallelism splits each rank's tokens
    out.push_back(cp);
  }
  return out;
}

std::vector<plan::Plan> layouts(const SearchSpace& space, const spec::ModelSpec& m, const spec::ClusterSpec& c,
                                const spec::TrainingSpec& t) {
  std::vector<plan::Plan> out;
  const int64_t n = c.num_gpus();
  // Every (micro-batch, chunks, recompute, experts, exchange, all-to-all overlap) of one (tp, pp, cp).
  auto add = [&](int64_t tp, int64_t pp, int64_t cp) {
    const int64_t dp = n / tp / pp / cp;
    const int64_t a2a = hierarchical_a2a_size(c, tp, cp);
    const auto comms = cp_exchanges(space, m, t, cp, tp, a2a);
    for (int64_t b : space.micro_batch) {
      if (t.global_batch_size % (b * dp)) continue;
      const int64_t G = t.global_batch_size / (b * dp);
      for (int64_t v : space.virtual_stages) {
        if (v < 1 || (v > 1 && (pp == 1 || m.num_layers % (pp * v) || G % pp))) continue;
        for (auto rc : space.recompute)
          for (auto [ep, etp] : expert_degrees(space, m, tp, cp, dp))
            for (auto comm : comms)
              for (bool overlap : space.moe_a2a_overlap) {
                if (overlap && (ep < 2 || t.moe_dispatcher == spec::MoeDispatcher::kAllGather)) continue;
                plan::Plan p;
                p.dp = dp;
                p.tp = tp;
                p.pp = pp;
                p.cp = cp;
                p.cp_comm = comm;
                p.cp_a2a = comm == plan::CpComm::kA2aP2p ? a2a : 1;
                p.ep = ep;
                p.etp = etp;
                p.overlap_moe_a2a = overlap;
                p.sequence_parallel = tp > 1;
                p.micro_batch_size = b;
                p.grad_accum_steps = G;
                p.virtual_pipeline_stages = v;
                p.recompute = rc;
                out.push_back(p);
              }
      }
    }
  };
  for (int64_t tp : space.tp) {
    if (tp > c.nvlink_gpus() || n % tp != 0) continue;
    if (!plan::check_tp(m, tp)) continue;
    if (tp > 1 && t.seq_length % tp) continue;  // sequence parallelism splits the sequence
    for (int64_t pp = 1; pp <= std::min<int64_t>(space.max_pp, m.num_layers); ++pp) {
      if ((n / tp) % pp) continue;
      for (int64_t cp : cp_degrees(space, m, t, n / pp, tp, pp)) add(tp, pp, cp);
    }
  }
  return out;
}

std::vector<int> zero_choices(const SearchSpace& space, int64_t dp, int64_t pp) {
  std::vector<int> out;
  const auto& allowed = pp == 1 ? space.zero_alone : space.zero_with_pp;
  for (int z : space.zero)
    if ((z == 0 || dp > 1) && allowed[static_cast<size_t>(z)])  // nothing to shard without dp
      out.push_back(z);
  return out;
}

std::vector<int64_t> ckpt_choices(const SearchSpace& space, int64_t layers) {
  if (space.ckpt_all_or_nothing) return layers > 0 ? std::vector<int64_t>{0, layers} : std::vector<int64_t>{0};
  std::vector<int64_t> out = {0};
  if (space.tune_ckpt)
    for (int64_t c = 1; c <= layers; ++c) out.push_back(c);
  return out;
}

bool offload_allowed(const SearchSpace& space, int zero, double weights, double gradients) {
  // Offloading weights without their gradients keeps little (Mist's rule wo > 0 ⇒ go > 0);
  // DeepSpeed offloads parameters only under ZeRO-3.
  if (weights > 0 && gradients == 0 && space.grad_offload.size() > 1) return false;
  if (weights > 0 && space.weight_offload_needs_zero3 && zero != 3) return false;
  return true;
}

std::vector<plan::StagePlan> stage_settings(const SearchSpace& space, int64_t layers, int64_t dp, int64_t pp) {
  std::vector<plan::StagePlan> out;
  for (int zero : zero_choices(space, dp, pp))
    for (int64_t c : ckpt_choices(space, layers))
      for (double wo : space.weight_offload)
        for (double go : space.grad_offload) {
          if (!offload_allowed(space, zero, wo, go)) continue;
          for (double oo : space.opt_offload)
            for (double ao : space.act_offload) {
              plan::StagePlan s;
              s.num_layers = layers;
              s.zero = zero;
              s.ckpt_layers = c;
              s.offload = {wo, go, oo, ao};
              out.push_back(s);
            }
        }
  return out;
}

}  // namespace mist::tuner
