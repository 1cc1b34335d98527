// The tuner's K/V exchanges (plan.cp_comm): each layout with cp > 1 is tried with every exchange
// the space has and plan::check_cp allows, and the best is kept; DeepSpeed's spaces search
// DeepSpeed-Ulysses (a2a, tp = pp = 1, as many key/value heads as heads), torchtitan's the ring.
#include <algorithm>
#include <set>

#include <gtest/gtest.h>

#include "export/deepspeed.hpp"
#include "tuner/stage_costs.hpp"
#include "tune_jobs.hpp"

namespace mist::tuner {
namespace {

using namespace testing;
using plan::CpComm;

spec::TrainingSpec long_training(int64_t gbs, int64_t seq) {
  auto t = training(gbs, seq);
  t.flash_attention = true;
  return t;
}

using Comms = std::vector<CpComm>;
const Comms kAll = {CpComm::kRing, CpComm::kAllToAll, CpComm::kAllGather};

TEST(CpCommTune, ExchangesFollowTheHeadsAndTheEngine) {
  const SearchSpace s;
  const auto llama3 = *spec::catalog_model("llama3-8b");  // 32 heads, 8 key/value heads
  const auto llama2 = *spec::catalog_model("llama2-7b");  // 32 and 32
  const auto t = long_training(8, 131072);
  EXPECT_EQ(cp_exchanges(s, llama3, t, 1, 1), Comms{CpComm::kRing});
  EXPECT_EQ(cp_exchanges(s, llama3, t, 8, 1), kAll);
  EXPECT_EQ(cp_exchanges(s, llama3, t, 4, 2), kAll);  // 4 key/value heads per TP rank over cp 4
  EXPECT_EQ(cp_exchanges(s, llama3, t, 8, 2), (Comms{CpComm::kRing, CpComm::kAllGather}));
  EXPECT_EQ(cp_exchanges(engine_space(engines::Engine::kMegatron), llama3, t, 8, 1), kAll);
  EXPECT_EQ(cp_exchanges(engine_space(engines::Engine::kTorchtitan), llama3, t, 8, 1), Comms{CpComm::kRing});
  // DeepSpeed-Ulysses: a2a only, tp = pp = 1, no grouped key/value heads; the named space agrees.
  for (const auto& ds : {engine_space(engines::Engine::kDeepSpeed), *named_space("deepspeed")}) {
    SCOPED_TRACE(ds.name);
    EXPECT_EQ(cp_exchanges(ds, llama2, t, 4, 1), Comms{CpComm::kAllToAll});
    EXPECT_EQ(cp_degrees(ds, llama2, t, 8, 1), (std::vector<int64_t>{1, 2, 4, 8}));
    EXPECT_EQ(cp_degrees(ds, llama3, t, 8, 1), (std::vector<int64_t>{1}));
  }
  const auto ds = engine_space(engines::Engine::kDeepSpeed);
  EXPECT_EQ(cp_degrees(ds, llama2, t, 8, 2), (std::vector<int64_t>{1}));
  EXPECT_EQ(cp_degrees(ds, llama2, t, 4, 1, /*pp=*/2), (std::vector<int64_t>{1}));
  // Every layout's exchange is one check_cp allows, and at tp 1 every exchange is tried.
  std::set<std::pair<int64_t, CpComm>> seen;
  for (const auto& p : layouts(s, llama3, cluster("H100-SXM5-80GB", 1, 8), t)) {
    EXPECT_TRUE(plan::check_cp(llama3, t, p.cp, p.cp_comm, p.tp)) << plan::plan_to_json(p).dump();
    if (p.cp == 1) { EXPECT_EQ(p.cp_comm, CpComm::kRing); }
    if (p.tp == 1) seen.insert({p.cp, p.cp_comm});
  }
  for (int64_t cp : {2, 4, 8})
    for (auto comm : kAll) EXPECT_TRUE(seen.contains({cp, comm})) << cp << " " << plan::to_string(comm);
}

// In an NVLink domain of several nodes (an NVL72 rack of 4-GPU trays) tensor parallelism may span
// trays, and a2a+p2p's all-to-all groups are the CP ranks the rack holds.
TEST(CpCommTune, NvlinkDomainBoundsTensorParallelismAndTheAllToAllGroups) {
  const SearchSpace s;
  const auto llama3 = *spec::catalog_model("llama3-8b");
  const auto t = long_training(8, 131072);
  auto trays = cluster("B200-SXM-180GB", 4, 4);
  auto rack = trays;
  rack.nvlink_domain = 16;
  auto max_tp = [&](const spec::ClusterSpec& c) {
    int64_t tp = 0;
    for (const auto& p : layouts(s, llama3, c, t)) tp = std::max(tp, p.tp);
    return tp;
  };
  EXPECT_EQ(max_tp(trays), 4);
  EXPECT_EQ(max_tp(rack), 8);  // the space's largest tp
  EXPECT_EQ(hierarchical_a2a_size(trays, 1, 16), 4);
  EXPECT_EQ(hierarchical_a2a_size(rack, 1, 16), 16);
  EXPECT_EQ(hierarchical_a2a_size(rack, 2, 16), 8);
}

// One search's memory programs serve every layout: each exchange gets its own (its buffers are
// the lowering's), so the search's peak of a setting is the memory model's for that plan, and the
// three differ (Llama-2-7B at 32K tokens, cp 8: the ring keeps cp step outputs, the all-gather the
// whole K/V twice, the a2a its moved q, k, v and output).
TEST(CpCommTune, EachExchangeIsCostedWithItsOwnBuffers) {
  const auto m = *spec::catalog_model("llama2-7b");
  const auto c = cluster("H100-SXM5-80GB", 1, 8);
  const auto t = long_training(8, 32768);
  auto job = prepare(m, c, t);
  ASSERT_TRUE(job) << job.error().to_string();
  const SearchSpace s;
  MemoryPrograms programs(*job);
  std::vector<double> peaks;
  for (auto comm : kAll) {
    plan::Plan layout;
    for (const auto& l : layouts(s, m, c, t))
      if (l.tp == 1 && l.cp == 8 && l.pp == 1 && l.micro_batch_size == 1 && l.recompute == plan::Recompute::kNone &&
          l.cp_comm == comm)
        layout = l;
    ASSERT_EQ(layout.cp, 8) << plan::to_string(comm);
    auto costs = StageCosts::create(*job, s, layout, programs);
    ASSERT_TRUE(costs) << costs.error().to_string();
    plan::StagePlan st;
    st.num_layers = 32;
    st.zero = 1;
    TuneStats stats;
    Point least{0, 0, 0, {}, 1e300};
    auto pts = costs->cost({st}, 0, stats, &least);
    ASSERT_EQ(pts.size(), 1u) << plan::to_string(comm);
    auto p = layout;
    p.stages = {st};
    auto pred = analysis::predict(*job, p);
    ASSERT_TRUE(pred) << pred.error().to_string();
    EXPECT_NEAR(pts[0].peak, pred->memory.stages[0].estimated_peak_bytes, 1e-9 * pts[0].peak) << plan::to_string(comm);
    peaks.push_back(pts[0].peak);
  }
  EXPECT_EQ(programs.compiled(), 3);
  EXPECT_NE(peaks[0], peaks[1]);
  EXPECT_NE(peaks[0], peaks[2]);
  EXPECT_NE(peaks[1], peaks[2]);
}

// A CP group of 16 across two nodes with 4,096 tokens per rank: each ring step's K/V block crosses
// the network in longer than the step's attention takes, while the all-to-all moves each rank's
// q, k, v and output once, and a2a+p2p does that inside each node and rings the 2 nodes. The search
// keeps the exchange that is fastest for the layout: the predictions of the same plan with the
// other exchanges are slower (or do not fit).
TEST(CpCommTune, KeepsTheFastestExchange) {
  const auto c = cluster("H100-SXM5-80GB", 2, 8);
  const auto t = long_training(4, 65536);
  auto tune_cp16 = [&](const spec::ModelSpec& m) {
    TuneOptions o;
    o.space.tp = {1};
    o.space.max_pp = 1;
    o.space.cp = {16};
    o.space.micro_batch = {1};
    o.space.weight_offload = o.space.grad_offload = o.space.opt_offload = o.space.act_offload = {0};
    o.top = 3;
    return tune(m, c, t, o);
  };
  const auto m = *spec::catalog_model("llama2-7b");
  auto r = tune_cp16(m);
  ASSERT_TRUE(r) << r.error().to_string();
  ASSERT_FALSE(r->best.empty());
  const auto& best = r->best.front();
  EXPECT_EQ(best.plan.cp, 16);
  // Megatron's hierarchical a2a+p2p with a node's 8 CP ranks as the all-to-all groups: its
  // all-to-alls stay on NVLink, only its ring of 2 crosses the network.
  EXPECT_EQ(best.plan.cp_comm, CpComm::kA2aP2p);
  EXPECT_EQ(best.plan.cp_a2a, 8);
  for (auto other : {CpComm::kRing, CpComm::kAllToAll, CpComm::kAllGather}) {
    auto q = best.plan;
    q.cp_comm = other;
    q.cp_a2a = 1;
    auto pred = predict(m, c, t, q);
    ASSERT_TRUE(pred) << pred.error().to_string();
    if (pred->memory.fits) { EXPECT_GT(pred->time.iteration_time_s, best.iteration_time_s) << plan::to_string(other); }
  }
  // Llama-2-13B's 40 heads do not split over 16 ranks: the same search never offers the flat a2a
  // (a2a+p2p splits them over 8).
  auto r13 = tune_cp16(*spec::catalog_model("llama2-13b"));
  ASSERT_TRUE(r13) << r13.error().to_string();
  ASSERT_FALSE(r13->best.empty());
  for (const auto& cand : r13->best) EXPECT_NE(cand.plan.cp_comm, CpComm::kAllToAll);
}

// `--engine deepspeed` with CP: every plan is Ulysses (tp 1, pp 1, a2a), and the best exports to
// --ds-sequence-parallel-size and imports back to itself; Llama-3-8B's grouped key/value heads
// leave no CP layout at all.
TEST(CpCommTune, DeepSpeedSearchesUlysses) {
  const auto c = cluster("H100-SXM5-80GB", 1, 8);
  const auto t = long_training(8, 131072);
  TuneOptions o;
  o.engine = engines::Engine::kDeepSpeed;
  o.space = engine_space(*o.engine);
  o.space.cp = {4};
  o.space.micro_batch = {1};
  o.space.weight_offload = o.space.grad_offload = o.space.opt_offload = o.space.act_offload = {0};
  o.top = 3;
  const auto m = *spec::catalog_model("llama2-7b");
  auto r = tune(m, c, t, o);
  ASSERT_TRUE(r) << r.error().to_string();
  ASSERT_FALSE(r->best.empty());
  for (const auto& cand : r->best) {
    EXPECT_EQ(cand.plan.cp, 4);
    EXPECT_EQ(cand.plan.cp_comm, CpComm::kAllToAll);
    EXPECT_EQ(cand.plan.tp, 1);
    EXPECT_EQ(cand.plan.pp, 1);
    EXPECT_TRUE(cand.prediction.memory.fits);
  }
  const auto& p = r->best.front().plan;
  auto exported = engines::export_plan(engines::Engine::kDeepSpeed, {m, c, t, p, {}});
  ASSERT_TRUE(exported && exported->exported);
  std::string cmd;
  for (const auto& opt : exported->exported->options) cmd += " " + opt.name + (opt.value ? " " + *opt.value : "");
  auto back = engines::import_deepspeed(exported->exported->config, cmd, m, c);
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(back->plan, engines::canonical(p));
  EXPECT_FALSE(tune(*spec::catalog_model("llama3-8b"), c, t, o));
}

}  // namespace
}  // namespace mist::tuner
