// `mist tune --engine E` returns only plans E can run (a property over many jobs).
#include <gtest/gtest.h>

#include "export/capability.hpp"
#include "export/deepspeed.hpp"
#include "export/megatron.hpp"
#include "export/splits.hpp"
#include "plan/plan.hpp"
#include "tuner/tuner.hpp"
#include "tune_jobs.hpp"
#include "tuner/engine_splits.hpp"

namespace mist::tuner {
namespace {

using namespace testing;

TEST(EngineTuning, EveryPlanIsExpressibleByItsEngine) {
  struct Job {
    int64_t layers, hidden, nodes, per_node, gbs, seq;
    const char* gpu;
  };
  const Job jobs[] = {{8, 2048, 1, 4, 16, 2048, "L4-24GB"},       {12, 2048, 1, 8, 32, 2048, "L4-24GB"},
                      {16, 4096, 1, 4, 64, 4096, "A100-SXM4-40GB"}, {16, 2048, 2, 4, 32, 2048, "A100-SXM4-40GB"},
                      {12, 4096, 2, 4, 64, 2048, "H100-SXM5-80GB"}, {8, 4096, 1, 2, 8, 2048, "L4-24GB"},
                      {16, 2048, 1, 4, 32, 2048, "V100-SXM2-32GB"}};
  int plans = 0, adjusted = 0;
  for (size_t k = 0; k < std::size(jobs); k += kSanitized ? 3 : 1)  // jobs 0, 3, 6 under the sanitizers
    for (auto e : engines::all_engines()) {
      const Job& j = jobs[k];
      const auto m = small_gpt(j.layers, j.hidden);
      const auto c = cluster(j.gpu, j.nodes, j.per_node);
      const bool bf16 = c.gpu.bf16_flops > 0;
      // torchtitan has no fp16; V100 has no bf16: that pair is refused as a whole (tested below).
      if (!bf16 && e == engines::Engine::kTorchtitan) continue;
      const auto t = training(j.gbs, j.seq, bf16 ? spec::Dtype::kBf16 : spec::Dtype::kFp16);
      TuneOptions o;
      o.engine = e;
      o.space = engine_space(e);
      o.space.tp = {1, 2};  // a smaller layout grid keeps the test quick; the settings are the engine's
      o.space.micro_batch = {1, 2};
      o.space.max_pp = 4;
      o.top = 3;
      auto r = tune(m, c, t, o);
      ASSERT_TRUE(r.has_value()) << engines::to_string(e) << ": " << r.error().to_string();
      adjusted += static_cast<int>(r->stats.engine_adjusted);
      for (size_t k = 0; k < r->best.size(); ++k) {
        const auto& cand = r->best[k];
        // Each plan once, even when two layouts map to it (torchtitan: selective recompute → none).
        for (size_t q = 0; q < k; ++q) EXPECT_FALSE(r->best[q].plan == cand.plan) << engines::to_string(e) << " #" << k;
        std::vector<Error> why;
        EXPECT_TRUE(engines::expressible(cand.plan, e, &why, &t))
            << engines::to_string(e) << ": " << (why.empty() ? "" : why.front().to_string());
        EXPECT_TRUE(plan::validate_plan(cand.plan, m, c, t).has_value());
        ++plans;
      }
    }
  EXPECT_GT(plans, kSanitized ? 12 : 30);
  EXPECT_GE(adjusted, 0);
}

TEST(EngineTuning, TrainingTheEngineCannotRunIsRefusedWithTheField) {
  const auto m = small_gpt(8, 2048);
  const auto c = cluster("V100-SXM2-32GB", 1, 4);
  TuneOptions o;
  o.engine = engines::Engine::kTorchtitan;
  o.space = engine_space(*o.engine);
  auto r = tune(m, c, training(16, 2048, spec::Dtype::kFp16), o);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().path.rfind("training", 0), 0u) << r.error().to_string();
}

// The engine's space is a restriction of mist's: restricting never finds a faster plan.
TEST(EngineTuning, MistIsNeverSlowerThanAnEngine) {
  const auto m = small_gpt(12, 2048);
  const auto c = cluster("L4-24GB", 1, 8);
  const auto t = training(32, 2048);
  TuneOptions full;
  full.space = small_space();
  full.space.micro_batch = {1, 2, 4};
  full.space.tp = {1, 2, 4};
  full.space.opt_offload = {0, 0.25, 0.5, 0.75, 1};
  full.rerank_by_simulation = false;
  auto best = tune(m, c, t, full);
  ASSERT_TRUE(best.has_value() && !best->best.empty());
  TuneOptions meg;
  meg.engine = engines::Engine::kMegatron;
  meg.space = engine_space(*meg.engine);
  meg.space.tp = full.space.tp;
  meg.space.micro_batch = full.space.micro_batch;
  meg.space.max_pp = full.space.max_pp;
  meg.rerank_by_simulation = false;
  auto restricted = tune(m, c, t, meg);
  ASSERT_TRUE(restricted.has_value() && !restricted->best.empty());
  EXPECT_LE(best->best.front().iteration_time_s, restricted->best.front().iteration_time_s * (1 + 1e-9));
}


std::vector<int64_t> split_of(const plan::Plan& p) {
  std::vector<int64_t> out;
  for (const auto& s : p.stages) out.push_back(s.num_layers);
  return out;
}

// Export to the engine, import back: the same plan (up to fields without effect).
void expect_round_trip(engines::Engine e, const plan::Plan& p, const spec::ModelSpec& m, const spec::ClusterSpec& c,
                       const spec::TrainingSpec& t) {
  auto x = engines::export_plan(e, {m, c, t, p, {}});
  ASSERT_TRUE(x.has_value()) << x.error().to_string();
  ASSERT_TRUE(x->exported) << plan::plan_to_json(p).dump();
  const std::string flags = engines::render_options(x->exported->options);
  auto back = e == engines::Engine::kMegatron ? engines::import_megatron_flags(flags, m, c)
                                              : engines::import_deepspeed(x->exported->config, flags, m, c);
  ASSERT_TRUE(back.has_value()) << back.error().to_string() << "\n" << flags;
  EXPECT_EQ(plan::plan_to_json(back->plan).dump(), plan::plan_to_json(engines::canonical(p)).dump()) << flags;
}

// Every plan `--engine megatron` returns has even middle stages, is stated by Megatron-LM's
// first/last flags (or none) and comes back from them unchanged, over many jobs; some are uneven.
TEST(EngineTuning, MegatronPlansHaveEvenMiddleStagesAndFirstLastFlags) {
  struct Job {
    int64_t layers, hidden, vocab, nodes, per_node, gbs, seq;
    const char* gpu;
  };
  const Job jobs[] = {{16, 2048, 256000, 1, 4, 32, 2048, "A100-SXM4-80GB"}, {24, 2048, 128000, 1, 8, 64, 2048, "H100-SXM5-80GB"},
                      {12, 2048, 50257, 1, 8, 32, 2048, "L4-24GB"},          {16, 4096, 50257, 1, 4, 64, 4096, "A100-SXM4-40GB"},
                      {30, 2048, 200000, 2, 4, 32, 2048, "A100-SXM4-80GB"},  {20, 2048, 150000, 1, 4, 16, 2048, "L4-24GB"},
                      {13, 2048, 64000, 1, 8, 32, 2048, "V100-SXM2-32GB"},   {32, 2048, 256000, 1, 8, 64, 2048, "A100-SXM4-40GB"}};
  // The Debug ASan+UBSan build is far slower: there every other job runs (job 2 has an uneven plan).
  const size_t stride = kSanitized ? 2 : 1;
  int plans = 0, uneven = 0, searched = 0;
  for (size_t k = 0; k < std::size(jobs); k += stride) {
    const Job& j = jobs[k];
    ++searched;
    auto m = small_gpt(j.layers, j.hidden);
    m.vocab_size = j.vocab;
    m.tie_word_embeddings = j.vocab % 2 == 0;
    const auto c = cluster(j.gpu, j.nodes, j.per_node);
    const auto t = training(j.gbs, j.seq, c.gpu.bf16_flops > 0 ? spec::Dtype::kBf16 : spec::Dtype::kFp16);
    TuneOptions o;
    o.engine = engines::Engine::kMegatron;
    o.space = engine_space(*o.engine);
    o.space.tp = {1, 2};
    o.space.micro_batch = {1, 2};
    o.space.max_pp = 8;
    o.top = 5;
    o.rerank_by_simulation = false;
    auto r = tune(m, c, t, o);
    ASSERT_TRUE(r.has_value()) << r.error().to_string();
    for (const auto& cand : r->best) {
      const auto split = split_of(cand.plan);
      SCOPED_TRACE(plan::plan_to_json(cand.plan).dump());
      for (size_t i = 2; i + 1 < split.size(); ++i) EXPECT_EQ(split[i], split[1]);
      EXPECT_TRUE(engines::expressible(cand.plan, *o.engine, nullptr, &t));
      const auto flags = engines::megatron_split(split, cand.plan.virtual_pipeline_stages);
      EXPECT_TRUE(!flags.layout || split == plan::even_split(m.num_layers, cand.plan.pp));
      uneven += split != plan::even_split(m.num_layers, cand.plan.pp);
      expect_round_trip(*o.engine, cand.plan, m, c, t);
      ++plans;
    }
  }
  EXPECT_GE(plans, 3 * searched);
  EXPECT_GT(uneven, 0);
}

// A job whose best Megatron-LM plan has an uneven split, strictly faster than the best with the
// even split only; its flags name the first or last stage count and import back to the plan.
TEST(EngineTuning, UnevenFirstLastSplitWinsWhenTheHeadIsHeavy) {
  // 24 blocks of 4096 with a 256k vocabulary, untied: the head weighs about five blocks and the
  // model needs a pipeline on four L4s.
  auto m = small_gpt(24, 4096);
  m.vocab_size = 256000;
  m.tie_word_embeddings = false;
  const auto c = cluster("L4-24GB", 1, 4);
  const auto t = training(32, 2048);
  TuneOptions o;
  o.engine = engines::Engine::kMegatron;
  o.space = engine_space(*o.engine);
  o.rerank_by_simulation = false;
  auto uneven = tune(m, c, t, o);
  o.space.split_rule = SplitRule::kEven;
  auto even = tune(m, c, t, o);
  ASSERT_TRUE(uneven && even && !uneven->best.empty() && !even->best.empty());
  const auto& best = uneven->best.front();
  const auto split = split_of(best.plan);
  EXPECT_NE(split, plan::even_split(m.num_layers, best.plan.pp)) << plan::plan_to_json(best.plan).dump();
  EXPECT_LT(best.iteration_time_s, even->best.front().iteration_time_s * (1 - 1e-3));
  auto x = engines::export_plan(engines::Engine::kMegatron, {m, c, t, best.plan, {}});
  ASSERT_TRUE(x && x->exported);
  bool first_last = false;
  for (const auto& opt : x->exported->options)
    first_last |= opt.name == "--decoder-first-pipeline-num-layers" || opt.name == "--decoder-last-pipeline-num-layers";
  EXPECT_TRUE(first_last) << engines::render_options(x->exported->options);
  expect_round_trip(engines::Engine::kMegatron, best.plan, m, c, t);
}

// `--engine deepspeed` with pipelines: the split is the one DeepSpeed's 'type:transformer'
// partition makes, ZeRO at most 1, found directly (not moved there), and it survives export/import.
TEST(EngineTuning, DeepSpeedPipelinesUseItsPartition) {
  const auto m = small_gpt(30, 4096);
  const auto c = cluster("L4-24GB", 2, 4);
  const auto t = training(32, 2048, spec::Dtype::kFp16);
  TuneOptions o;
  o.engine = engines::Engine::kDeepSpeed;
  o.space = engine_space(*o.engine);
  o.space.micro_batch = {1, 2};
  o.top = 8;
  o.rerank_by_simulation = false;
  auto r = tune(m, c, t, o);
  ASSERT_TRUE(r.has_value()) << r.error().to_string();
  int piped = 0;
  for (const auto& cand : r->best) {
    SCOPED_TRACE(plan::plan_to_json(cand.plan).dump());
    EXPECT_TRUE(engines::expressible(cand.plan, *o.engine, nullptr, &t));
    if (cand.plan.pp == 1) continue;
    ++piped;
    EXPECT_EQ(split_of(cand.plan), engines::deepspeed_pipe_layers(m.num_layers, cand.plan.pp, true));
    EXPECT_LE(cand.plan.stages[0].zero, 1);
    expect_round_trip(*o.engine, cand.plan, m, c, t);
  }
  EXPECT_GT(piped, 0);
}

}  // namespace
}  // namespace mist::tuner
