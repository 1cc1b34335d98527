// The splits engine searches try (engine_splits) and what the uniform search does with them: every
// split is one the engine's options state, and the Megatron-LM search finds an uneven split where
// the embedding or head makes the first or last stage heavy.
#include "tuner/engine_splits.hpp"

#include <algorithm>
#include <numeric>

#include <gtest/gtest.h>

#include "analysis/time_model.hpp"
#include "export/capability.hpp"
#include "export/megatron.hpp"
#include "export/splits.hpp"
#include "tuner/uniform_search.hpp"
#include "tune_jobs.hpp"

namespace mist::tuner {
namespace {

using namespace testing;

SearchSpace megatron_space() { return engine_space(engines::Engine::kMegatron); }

// Megatron's own check of first/last counts (transformer_config.py), restated by the exporter.
bool megatron_accepts(const std::vector<int64_t>& split, int64_t v) {
  const int64_t L = std::accumulate(split.begin(), split.end(), int64_t{0});
  const int64_t pp = static_cast<int64_t>(split.size());
  const auto flags = engines::megatron_split(split, v);
  if (flags.layout) return false;  // needs --pipeline-model-parallel-layout: not a first/last split
  if (!flags.first && !flags.last) return L % pp == 0;
  auto back = engines::megatron_layers_from_first_last(L, pp, flags.first, flags.last);
  return back && *back == split;
}

TEST(EngineSplits, MegatronSplitsAreEvenOrFirstLastWithEqualMiddleStages) {
  const SearchSpace space = megatron_space();
  int uneven = 0;
  for (int64_t L = 2; L <= 96; ++L)
    for (int64_t pp = 1; pp <= std::min<int64_t>(L, 16); ++pp)
      for (int64_t v : {1, 2, 3}) {
        if (v > 1 && (pp == 1 || L % (pp * v))) continue;  // the layouts the tuner builds
        const auto splits = engine_splits(space, L, pp, v);
        ASSERT_FALSE(splits.empty()) << L << " " << pp << " " << v;
        EXPECT_EQ(splits.front(), plan::even_split(L, pp));
        const int64_t mid = std::llround(double(L) / double(pp));
        for (size_t k = 0; k < splits.size(); ++k) {
          const auto& s = splits[k];
          SCOPED_TRACE(::testing::Message() << "L " << L << " pp " << pp << " v " << v << " split " << k);
          ASSERT_EQ(static_cast<int64_t>(s.size()), pp);
          EXPECT_EQ(std::accumulate(s.begin(), s.end(), int64_t{0}), L);
          for (int64_t l : s) EXPECT_TRUE(l >= 1 && l % v == 0) << l;
          for (size_t j = 0; j < k; ++j) EXPECT_NE(splits[j], s);
          if (k == 0) continue;
          ++uneven;
          for (size_t i = 2; i + 1 < s.size(); ++i) EXPECT_EQ(s[i], s[1]);  // middle stages even
          EXPECT_LE(std::abs(s.front() - mid), space.layer_slack);
          if (pp > 2) {
            EXPECT_LE(std::abs(s.back() - mid), space.layer_slack);
          }
          EXPECT_TRUE(megatron_accepts(s, v));
        }
      }
  EXPECT_GT(uneven, 1000);
  // 32 blocks on 4 stages, slack 1: first and last in 7..9, the 2 middle stages sharing the rest.
  SearchSpace narrow = space;
  narrow.layer_slack = 1;
  const auto got = engine_splits(narrow, 32, 4);
  const std::vector<std::vector<int64_t>> want = {
      {8, 8, 8, 8}, {7, 9, 9, 7}, {7, 8, 8, 9}, {9, 8, 8, 7}, {9, 7, 7, 9}};
  EXPECT_EQ(got, want);
}

TEST(EngineSplits, DeepSpeedSearchesTheSplitOfItsPartitionMethod) {
  const SearchSpace space = engine_space(engines::Engine::kDeepSpeed);
  EXPECT_EQ(space.zero_with_pp, (std::array<bool, 4>{true, true, false, false}));
  for (int64_t L = 2; L <= 64; ++L)
    for (int64_t pp = 1; pp <= std::min<int64_t>(L, 8); ++pp)
      for (bool mixed : {false, true}) {
        const auto splits = engine_splits(space, L, pp, 1, mixed);
        ASSERT_EQ(splits.size(), 1u);
        EXPECT_EQ(splits[0], pp == 1 ? std::vector<int64_t>{L} : engines::deepspeed_pipe_layers(L, pp, mixed));
      }
  // 30 blocks on 4 stages: the blocks with the most non-block specs around them go to the end.
  EXPECT_EQ(engine_splits(space, 30, 4, 1, true).front(), (std::vector<int64_t>{8, 8, 7, 7}));
  // ZeRO-2/3 are not tried with a pipeline.
  for (int z : zero_choices(space, 8, 2)) EXPECT_LE(z, 1);
  EXPECT_EQ(zero_choices(space, 8, 1).back(), 3);
}

TEST(EngineSplits, TorchtitanSearchesTheSplitsItsGeneratorMakes) {
  const SearchSpace space = engine_space(engines::Engine::kTorchtitan);
  int several = 0;
  for (int64_t L = 2; L <= 64; ++L)
    for (int64_t pp = 2; pp <= std::min<int64_t>(L, 8); ++pp) {
      const auto splits = engine_splits(space, L, pp);
      const auto defaults = engines::torchtitan_stage_layers(L, pp, 1, 1);
      if (!defaults.empty() && std::ranges::min(defaults) >= 1) {  // mist's stages hold a block or more
        ASSERT_FALSE(splits.empty());
        EXPECT_EQ(splits.front(), defaults);  // torchtitan's default weights first
      }
      for (const auto& s : splits) {
        EXPECT_EQ(std::accumulate(s.begin(), s.end(), int64_t{0}), L);
        EXPECT_TRUE(engines::torchtitan_split(s, 1).has_value()) << L << " " << pp;
      }
      several += splits.size() > 3;
    }
  EXPECT_GT(several, 100);
}

TEST(EngineSplits, EvenRuleIsTheBaselineSplit) {
  auto space = *named_space("megatron");
  EXPECT_EQ(engine_splits(space, 30, 4), (std::vector<std::vector<int64_t>>{{8, 8, 7, 7}}));
  EXPECT_TRUE(engine_splits(space, 3, 4).empty());
}

// A GPT with a 256k vocabulary: its head costs about as much as ten 2048-wide blocks, so the last
// stage of an even split is the slowest and Megatron's --decoder-last-pipeline-num-layers helps.
spec::ModelSpec big_vocab() {
  auto m = small_gpt(16, 2048);
  m.vocab_size = 256000;
  m.tie_word_embeddings = false;
  return m;
}

struct Searched {
  std::optional<StageChoice> best;
  plan::Plan plan;
};

Searched search_layout(const SearchSpace& space, const spec::ModelSpec& m, const spec::ClusterSpec& c,
                       const spec::TrainingSpec& t, plan::Plan layout) {
  auto job = prepare(m, c, t);
  EXPECT_TRUE(job.has_value());
  MemoryPrograms programs(*job);
  auto costs = StageCosts::create(*job, space, layout, programs);
  EXPECT_TRUE(costs.has_value());
  TuneStats stats;
  std::vector<Point> least(static_cast<size_t>(layout.pp), Point{0, 0, 1e300, {}, 1e300});
  Searched out{uniform_search(*costs, space, t, m.num_layers, stats, least), layout};
  if (out.best) {
    for (const auto& p : out.best->stages) out.plan.stages.push_back(p.st);
    // The bound is a bound.
    EXPECT_LE(uniform_lower_bound(*costs, space, t, m.num_layers), out.best->objective * (1 + 1e-12));
  }
  return out;
}

TEST(EngineSplits, UnevenSplitWinsWhenTheHeadIsHeavy) {
  const auto m = big_vocab();
  const auto c = cluster("A100-SXM4-80GB", 1, 4);
  const auto t = training(32, 2048);
  plan::Plan layout;
  layout.dp = 1;
  layout.tp = 1;
  layout.pp = 4;
  layout.micro_batch_size = 1;
  layout.grad_accum_steps = 32;
  SearchSpace even = megatron_space();
  even.split_rule = SplitRule::kEven;
  const auto a = search_layout(even, m, c, t, layout);
  const auto b = search_layout(megatron_space(), m, c, t, layout);
  ASSERT_TRUE(a.best && b.best);
  EXPECT_LT(b.best->objective, a.best->objective * 0.97);  // a few percent at least
  std::vector<int64_t> split;
  for (const auto& s : b.plan.stages) split.push_back(s.num_layers);
  EXPECT_LT(split.back(), split[1]) << "the head's stage sheds blocks";
  EXPECT_TRUE(megatron_accepts(split, 1));
  // The search's value is what `mist predict` computes for the plan.
  auto pred = predict(m, c, t, b.plan);
  ASSERT_TRUE(pred.has_value());
  EXPECT_NEAR(pred->time.iteration_time_s, b.best->objective, 1e-9 * b.best->objective);
  EXPECT_TRUE(engines::expressible(b.plan, engines::Engine::kMegatron, nullptr, &t));
}

}  // namespace
}  // namespace mist::tuner
