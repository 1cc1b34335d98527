// The report's drawing helpers: escaping, ticks, the Pareto front.
#include <random>

#include <gtest/gtest.h>

#include "html/pareto.hpp"
#include "html/svg.hpp"

namespace mist::html {
namespace {

TEST(HtmlSvg, EscapesEveryCharacterThatEndsTextOrAnAttribute) {
  EXPECT_EQ(escape("<b class=\"x\">Tom's & Jerry's</b>"),
            "&lt;b class=&quot;x&quot;&gt;Tom&#39;s &amp; Jerry&#39;s&lt;/b&gt;");
  EXPECT_EQ(escape("dp 2 × tp 4, 12.3 µs"), "dp 2 × tp 4, 12.3 µs");  // UTF-8 passes through
}

TEST(HtmlSvg, TicksAreRoundAndCoverTheRange) {
  for (auto [lo, hi] : {std::pair{0.0, 80.0}, {23.4, 27.9}, {0.0, 0.0123}, {11000.0, 61000.0}, {-3.0, 7.0}}) {
    const auto t = nice_ticks(lo, hi);
    ASSERT_GE(t.size(), 2u);
    EXPECT_LE(t.front(), lo);
    EXPECT_GE(t.back(), hi);
    EXPECT_LE(t.size(), 13u);
    const double step = t[1] - t[0];
    for (size_t i = 1; i < t.size(); ++i) EXPECT_NEAR(t[i] - t[i - 1], step, step * 1e-9);
  }
  EXPECT_EQ(nice_ticks(0, 80), (std::vector<double>{0, 20, 40, 60, 80}));
  EXPECT_EQ(tick_label(0.25), "0.25");
  EXPECT_EQ(tick_label(120), "120");
  EXPECT_EQ(tick_label(-0.0), "0");
  EXPECT_EQ(num(-0.04), "0");
  EXPECT_EQ(num(12.25), "12.2");
}

// Front points are not dominated; every other point is dominated by a front point.
TEST(HtmlPareto, TheFrontIsExactlyTheNonDominatedPoints) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> d(0, 20);  // small integers: many ties
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<std::pair<double, double>> pts;
    for (int i = 0; i < 40; ++i) pts.emplace_back(d(rng), d(rng));
    const auto front = pareto_front(pts);
    auto dominates = [](const auto& a, const auto& b) {
      return a.first <= b.first && a.second <= b.second && (a.first < b.first || a.second < b.second);
    };
    for (size_t i = 0; i < pts.size(); ++i) {
      bool dominated = false;
      for (size_t j = 0; j < pts.size(); ++j) dominated = dominated || dominates(pts[j], pts[i]);
      EXPECT_EQ(front[i], !dominated) << "point " << i << " (" << pts[i].first << ", " << pts[i].second << ")";
    }
  }
  // Equal points are both kept; a point equal in one coordinate and worse in the other is not.
  EXPECT_EQ(pareto_front({{1, 5}, {1, 5}, {1, 6}, {2, 5}, {3, 1}}), (std::vector<bool>{true, true, false, false, true}));
  EXPECT_TRUE(pareto_front({}).empty());
}

}  // namespace
}  // namespace mist::html
