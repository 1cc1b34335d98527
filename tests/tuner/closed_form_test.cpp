// The pipeline closed form has one home (analysis::pipeline_time); the tuner's allocation-free form
// over stage points (plan_objective) and its DP form over running sums (pipeline_objective) must give
// the same number for the same stages.
#include <random>

#include <gtest/gtest.h>

#include "analysis/time_model.hpp"
#include "tuner/inter_stage.hpp"

namespace mist::tuner {
namespace {

TEST(ClosedForm, TunerFormsEqualTheTimeModels) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(0.0, 2.0);
  int checked = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    const int pp = 1 + trial % 8;
    const int64_t v = 1 + trial % 3, G = 1 + trial % 17;
    std::vector<Point> pts;
    std::vector<double> T, D, B;
    double sum = 0, mx = 0, before = 0, exposed = -1e300;
    for (int i = 0; i < pp; ++i) {
      Point p{u(rng), u(rng) - 0.5, 0, {}, 0, 0};
      p.B = p.T * u(rng) / 2;
      pts.push_back(p);
      T.push_back(p.T), D.push_back(p.D), B.push_back(p.B);
      exposed = std::max(exposed, p.D - before / static_cast<double>(v));
      sum += p.T, before += p.B, mx = std::max(mx, p.T);
    }
    const double model = analysis::pipeline_time(T, D, B, G, v).total();
    EXPECT_EQ(plan_objective(pts, static_cast<double>(G), v), model);
    EXPECT_EQ(pipeline_objective(sum, mx, exposed, static_cast<double>(G), v), model);
    ++checked;
  }
  EXPECT_EQ(checked, 2000);
}

}  // namespace
}  // namespace mist::tuner
