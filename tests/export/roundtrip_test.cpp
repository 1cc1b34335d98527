// Properties over many random plans and jobs, for every engine: the nearest expressible plan is
// valid, expressible and a fixed point; an expressible plan is its own nearest; export then
// import gives the plan back (up to fields with no effect, canonical()) and the training settings.
#include <random>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "export/deepspeed.hpp"
#include "export/megatron.hpp"
#include "export/torchtitan.hpp"
#include "export_jobs.hpp"

namespace mist::engines {
namespace {

using testing::cluster;
using testing::model;
using testing::training;

struct Job {
  spec::ModelSpec m;
  spec::ClusterSpec c;
  spec::TrainingSpec t;
};

std::vector<Job> jobs() {
  return {{model("gpt3-13b"), cluster(2, 8), training(512, 2048)},
          {model("llama3-8b"), cluster(1, 8), training(256, 4096)},
          {model("llama2-7b"), cluster(4, 8), training(1024, 4096, spec::Dtype::kFp16)},
          {model("gpt3-2.7b"), cluster(1, 4), training(64, 2048, spec::Dtype::kFp32)},
          {model("falcon-40b"), cluster(2, 8), training(128, 2048)},
          {model("mist-gpt-1.3b"), cluster(1, 2), training(32, 1024)}};
}

Result<ImportedJob> import_back(Engine e, const Exported& x, const spec::ModelSpec& m, const spec::ClusterSpec& c) {
  const std::string text = render_options(x.options);
  switch (e) {
    case Engine::kMegatron: return import_megatron_flags(text, m, c);
    case Engine::kDeepSpeed: return import_deepspeed(x.config, text, m, c);
    case Engine::kTorchtitan: break;
  }
  return import_torchtitan_overrides(text, m, c);
}

void check_training(Engine e, const TrainingOverrides& got, const spec::TrainingSpec& t) {
  EXPECT_EQ(got.global_batch_size, t.global_batch_size);
  EXPECT_EQ(got.seq_length, t.seq_length);
  EXPECT_EQ(got.precision, t.precision);
  if (e != Engine::kTorchtitan) {
    EXPECT_EQ(got.optimizer, t.optimizer);
    EXPECT_EQ(got.dropout, t.dropout);
  }
}

TEST(RoundTrip, NearestThenExportThenImportGivesThePlanBack) {
  std::mt19937 rng(20260830);
  int exported = 0, refused = 0;
  for (const auto& job : jobs()) {
    for (int i = 0; i < 150; ++i) {
      const plan::Plan p = testing::random_plan(rng, job.m, job.c, job.t);
      for (Engine e : all_engines()) {
        if (e == Engine::kTorchtitan && job.t.precision == spec::Dtype::kFp16) continue;  // training-level
        SCOPED_TRACE(fmt::format("{} {} plan {}", to_string(e), job.m.name, plan::plan_to_json(p).dump()));
        const Nearest n = nearest_expressible(p, e, &job.t);
        ASSERT_TRUE(plan::validate_plan(n.plan, job.m, job.c, job.t)) << plan::plan_to_json(n.plan).dump();
        std::vector<Error> why;
        EXPECT_TRUE(expressible(n.plan, e, &why, &job.t)) << (why.empty() ? "" : why[0].to_string());
        EXPECT_EQ(nearest_expressible(n.plan, e, &job.t).plan, n.plan);
        EXPECT_EQ(expressible(p, e, nullptr, &job.t), n.plan == p);
        EXPECT_EQ(n.changes.empty(), n.plan == p);
        (n.plan == p ? exported : refused)++;

        auto r = export_plan(e, {job.m, job.c, job.t, n.plan, {}});
        ASSERT_TRUE(r) << r.error().to_string();
        ASSERT_TRUE(r->exported);
        auto back = import_back(e, *r->exported, job.m, job.c);
        ASSERT_TRUE(back) << back.error().to_string() << "\n" << render_options(r->exported->options);
        EXPECT_EQ(plan::plan_to_json(back->plan).dump(), plan::plan_to_json(canonical(n.plan)).dump())
            << render_options(r->exported->options);
        check_training(e, back->training, job.t);
      }
    }
  }
  // The generator reaches both sides of every engine's boundary.
  EXPECT_GT(exported, 50);
  EXPECT_GT(refused, 50);
}

TEST(RoundTrip, DeepSpeedJsonAloneCarriesDataParallelPlans) {
  std::mt19937 rng(7);
  const auto m = model("gpt3-2.7b");
  const auto c = cluster(1, 8);
  const auto t = training(256, 2048);
  int checked = 0;
  for (int i = 0; i < 200; ++i) {
    plan::Plan p = testing::random_plan(rng, m, c, t);
    if (p.tp != 1 || p.pp != 1) continue;
    p.recompute = plan::Recompute::kNone;
    p.stages[0].ckpt_layers = 0;
    p = nearest_expressible(p, Engine::kDeepSpeed, &t).plan;
    auto back = import_deepspeed(deepspeed_config(t, p), "", m, c);
    ASSERT_TRUE(back) << back.error().to_string();
    EXPECT_EQ(back->plan, canonical(p)) << plan::plan_to_json(p).dump();
    ++checked;
  }
  EXPECT_GT(checked, 10);
}

}  // namespace
}  // namespace mist::engines
