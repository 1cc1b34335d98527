// Jobs and plans for the export tests.
#pragma once

#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "export/capability.hpp"
#include "export/exchange.hpp"
#include "plan/plan.hpp"
#include "spec/cluster.hpp"
#include "spec/model.hpp"
#include "spec/training.hpp"

namespace mist::engines::testing {

// Exported options as one command line (" --flag value --switch"), and the value of one option
// (nullopt when absent, "" for a switch).
inline std::string command(const std::vector<Option>& options) {
  std::string cmd;
  for (const auto& o : options) cmd += " " + o.name + (o.value ? " " + *o.value : "");
  return cmd;
}
// `cmd` with the first occurrence of `token` (" --flag value") taken out.
inline std::string without_token(std::string cmd, std::string_view token) {
  const size_t at = cmd.find(token);
  EXPECT_NE(at, std::string::npos) << "no \"" << token << "\" in" << cmd;
  if (at != std::string::npos) cmd.erase(at, token.size());
  return cmd;
}
inline std::optional<std::string> value(const std::vector<Option>& options, std::string_view name) {
  for (const auto& o : options)
    if (o.name == name) return o.value.value_or("");
  return std::nullopt;
}

inline spec::ModelSpec model(const std::string& name) {
  auto m = spec::catalog_model(name);
  EXPECT_TRUE(m.has_value()) << name;
  return *m;
}

inline spec::ClusterSpec cluster(int64_t nodes, int64_t per_node, const std::string& gpu = "A100-SXM4-80GB") {
  auto c = spec::cluster_from_json(Json{{"gpu", gpu}, {"nodes", nodes}, {"gpus_per_node", per_node}}, "cluster");
  EXPECT_TRUE(c.has_value());
  return *c;
}

inline spec::TrainingSpec training(int64_t gbs, int64_t seq, spec::Dtype precision = spec::Dtype::kBf16) {
  spec::TrainingSpec t;
  t.global_batch_size = gbs;
  t.seq_length = seq;
  t.precision = precision;
  t.dropout = false;
  return t;
}

// A plan with `layers` per stage, the same stage options everywhere.
inline plan::Plan plan(int64_t dp, int64_t tp, std::vector<int64_t> layers, int64_t mbs, int64_t gas,
                       int zero = 0, int64_t ckpt = 0) {
  plan::Plan p;
  p.dp = dp;
  p.tp = tp;
  p.pp = static_cast<int64_t>(layers.size());
  p.micro_batch_size = mbs;
  p.grad_accum_steps = gas;
  for (int64_t n : layers) {
    plan::StagePlan s;
    s.num_layers = n;
    s.zero = zero;
    s.ckpt_layers = std::min(ckpt, n);
    p.stages.push_back(s);
  }
  return p;
}

inline std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> d;
  for (int64_t i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

// A random valid plan for the job (validate_plan holds), drawing every knob mist has.
inline plan::Plan random_plan(std::mt19937& rng, const spec::ModelSpec& m, const spec::ClusterSpec& c,
                              const spec::TrainingSpec& t) {
  auto pick = [&](const std::vector<int64_t>& v) { return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng)]; };
  auto coin = [&] { return std::uniform_int_distribution<int>(0, 1)(rng) == 1; };
  auto fraction = [&] {
    const double choices[] = {0, 0, 0, 0.25, 0.5, 1, 1, 0.3};
    return choices[std::uniform_int_distribution<int>(0, 7)(rng)];
  };
  for (;;) {
    std::vector<int64_t> tps;
    for (int64_t d : divisors(c.num_gpus()))
      if (d <= 8 && m.num_heads % d == 0 && m.num_kv_heads % d == 0 && m.ffn_hidden_size % d == 0) tps.push_back(d);
    const int64_t tp = pick(tps);
    std::vector<int64_t> pps;
    for (int64_t d : divisors(c.num_gpus() / tp))
      if (d <= m.num_layers && d <= 8) pps.push_back(d);
    const int64_t pp = pick(pps);
    const int64_t dp = c.num_gpus() / (tp * pp);
    if (t.global_batch_size % dp != 0) continue;
    const int64_t mbs = pick(divisors(t.global_batch_size / dp));
    if (mbs > 16) continue;
    const int64_t gas = t.global_batch_size / (mbs * dp);
    int64_t v = 1;
    if (pp > 1 && gas % pp == 0 && coin()) v = pick({2, 2, 4});
    // A random split into pp stages of whole chunks of v layers.
    if (m.num_layers % v != 0 || m.num_layers / v < pp) v = 1;
    const int64_t chunks = m.num_layers / v;
    std::vector<int64_t> cuts;
    if (coin()) {
      for (int64_t i = 1; i < pp; ++i) cuts.push_back(chunks * i / pp);  // near even
    } else {
      std::vector<int64_t> all;
      for (int64_t i = 1; i < chunks; ++i) all.push_back(i);
      std::shuffle(all.begin(), all.end(), rng);
      cuts.assign(all.begin(), all.begin() + (pp - 1));
      std::sort(cuts.begin(), cuts.end());
    }
    plan::Plan p;
    p.dp = dp, p.tp = tp, p.pp = pp, p.micro_batch_size = mbs, p.grad_accum_steps = gas;
    p.virtual_pipeline_stages = v;
    p.sequence_parallel = tp > 1 && t.seq_length % tp == 0 && coin();
    p.recompute = coin() && coin() ? plan::Recompute::kSelective : plan::Recompute::kNone;
    p.overlap_grad_reduce = coin() || coin();
    p.overlap_param_gather = coin() || coin();
    p.overlap_tp_comm = p.sequence_parallel && coin();
    // Half the plans give every stage the same options (engines like those), half draw per stage.
    const bool same = coin();
    const int zero_all = std::uniform_int_distribution<int>(0, 3)(rng);
    const int ckpt_mode_all = std::uniform_int_distribution<int>(0, 4)(rng);  // 0,1 none; 2 all; 3,4 some
    const int64_t ckpt_some = std::uniform_int_distribution<int64_t>(1, 8)(rng);
    plan::Offload off_all;
    if (coin() && coin()) off_all.weights = off_all.gradients = fraction();
    if (coin()) off_all.optimizer_states = fraction();
    if (coin() && coin()) off_all.activations = fraction();
    if (coin() && coin()) off_all = {1, 1, 1, 0};
    if (p.recompute == plan::Recompute::kSelective && coin()) off_all.activations = 0;
    int64_t prev = 0;
    for (int64_t i = 0; i < pp; ++i) {
      const int64_t cut = i + 1 < pp ? cuts[static_cast<size_t>(i)] : chunks;
      plan::StagePlan s;
      s.num_layers = (cut - prev) * v;
      prev = cut;
      s.zero = same ? zero_all : std::uniform_int_distribution<int>(0, 3)(rng);
      const int mode = same ? ckpt_mode_all : std::uniform_int_distribution<int>(0, 4)(rng);
      s.ckpt_layers = mode <= 1 ? 0
                      : mode == 2 ? s.num_layers
                      : same ? std::min(s.num_layers, ckpt_some * v)
                             : std::uniform_int_distribution<int64_t>(0, s.num_layers)(rng);
      if (p.recompute == plan::Recompute::kSelective && coin()) s.ckpt_layers = 0;
      s.offload = off_all;
      if (!same && coin()) s.offload.optimizer_states = fraction();
      p.stages.push_back(s);
    }
    if (plan::validate_plan(p, m, c, t)) return p;
  }
}

}  // namespace mist::engines::testing
