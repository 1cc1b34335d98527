// TuneResult::explored: the best plan of each layout the search completed, by the search's figures.
#include <algorithm>

#include <gtest/gtest.h>

#include "tuner/tuner.hpp"
#include "tune_jobs.hpp"

namespace mist::tuner {
namespace {

using namespace testing;

TEST(TunerExplored, OnePlanPerLayoutSearchedTheBestAmongThem) {
  const auto m = small_gpt(8, 2048);
  const auto c = cluster("L4-24GB", 1, 4);
  const auto t = training(16, 2048);
  TuneOptions o;
  o.space.tp = {1, 2};
  o.space.micro_batch = {1, 2};
  o.rerank_by_simulation = false;
  auto r = tune(m, c, t, o);
  ASSERT_TRUE(r.has_value()) << r.error().to_string();
  ASSERT_FALSE(r->best.empty());
  ASSERT_FALSE(r->explored.empty());
  EXPECT_LE(r->explored.size(), kMaxExplored);
  EXPECT_LE(static_cast<int64_t>(r->explored.size()), r->stats.layouts - r->stats.layouts_pruned);
  const auto& best = r->best.front();
  auto same = [&](const Explored& e) { return e.plan == best.plan; };
  const auto it = std::find_if(r->explored.begin(), r->explored.end(), same);
  ASSERT_NE(it, r->explored.end()) << "the chosen plan is among the explored";
  EXPECT_NEAR(it->iteration_time_s / best.iteration_time_s, 1.0, 1e-9);
  // The estimate the search judged it on: within the memory band of the replayed prediction.
  EXPECT_NEAR(it->peak_memory_bytes / best.peak_memory_bytes, 1.0, 0.05);
  for (const auto& e : r->explored) {
    EXPECT_GE(e.iteration_time_s, best.iteration_time_s * (1 - 1e-12));  // closed form: the best is fastest
    EXPECT_GT(e.peak_memory_bytes, 0);
    EXPECT_LE(e.peak_memory_bytes, c.gpu.memory_bytes);
    EXPECT_EQ(std::count_if(r->explored.begin(), r->explored.end(), [&](const Explored& x) { return x.plan == e.plan; }), 1);
  }
}

}  // namespace
}  // namespace mist::tuner
