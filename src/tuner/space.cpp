#include "tuner/space.hpp"

namespace mist::tuner {

Result<SearchSpace> named_space(const std::string& name) {
  SearchSpace s;
  s.name = name;
  if (name == "mist") return s;
  if (name == "megatron") {
    s.zero = {0, 1};  // --use-distributed-optimizer off/on
    s.weight_offload = s.grad_offload = s.opt_offload = s.act_offload = {0};
    s.uniform_stage_settings = true;
    s.uniform_split = true;
    return s;
  }
  if (name == "deepspeed") {
    s.tp = {1};
    s.max_pp = 1;
    s.recompute = {plan::Recompute::kNone};
    s.ckpt_all_or_nothing = true;
    s.weight_offload = {0, 1};  // offload_param (ZeRO-3 only)
    s.grad_offload = {0};
    s.opt_offload = {0, 1};     // offload_optimizer
    s.act_offload = {0};
    s.uniform_stage_settings = true;
    s.uniform_split = true;
    return s;
  }
  return fail("--space", "must be one of mist, megatron, deepspeed; got \"" + name + "\"");
}

std::vector<plan::Plan> layouts(const SearchSpace& space, const spec::ModelSpec& m, const spec::ClusterSpec& c,
                                const spec::TrainingSpec& t) {
  std::vector<plan::Plan> out;
  const int64_t n = c.num_gpus();
  for (int64_t tp : space.tp) {
    if (tp > c.gpus_per_node || n % tp != 0) continue;
    if (m.num_heads % tp || m.num_kv_heads % tp || m.ffn_hidden_size % tp) continue;
    if (tp > 1 && t.seq_length % tp) continue;  // sequence parallelism splits the sequence
    for (int64_t pp = 1; pp <= std::min<int64_t>(space.max_pp, m.num_layers); ++pp) {
      if ((n / tp) % pp) continue;
      const int64_t dp = n / tp / pp;
      for (int64_t b : space.micro_batch) {
        if (t.global_batch_size % (b * dp)) continue;
        for (auto rc : space.recompute) {
          plan::Plan p;
          p.dp = dp;
          p.tp = tp;
          p.pp = pp;
          p.sequence_parallel = tp > 1;
          p.micro_batch_size = b;
          p.grad_accum_steps = t.global_batch_size / (b * dp);
          p.recompute = rc;
          out.push_back(p);
        }
      }
    }
  }
  return out;
}

std::vector<plan::StagePlan> stage_settings(const SearchSpace& space, int64_t layers, int64_t dp) {
  std::vector<int64_t> ckpts;
  if (space.ckpt_all_or_nothing)
    ckpts = {0, layers};
  else if (space.tune_ckpt)
    for (int64_t c = 0; c <= layers; ++c) ckpts.push_back(c);
  else
    ckpts = {0};
  std::vector<plan::StagePlan> out;
  for (int zero : space.zero) {
    if (zero > 0 && dp == 1) continue;  // nothing to shard
    for (int64_t c : ckpts)
      for (double wo : space.weight_offload)
        for (double go : space.grad_offload) {
          // Offloading weights without their gradients keeps little (Mist's rule wo > 0 ⇒ go > 0);
          // DeepSpeed offloads parameters only under ZeRO-3.
          if (wo > 0 && go == 0 && space.grad_offload.size() > 1) continue;
          if (wo > 0 && space.name == "deepspeed" && zero != 3) continue;
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
  }
  return out;
}

}  // namespace mist::tuner
