// Training fields one engine alone runs, refused for the others by one rule
// (spec::engine_training_refusals) that the prediction and the export share: the same fields and
// words either way, the recompute modules scoped to a plan that recomputes selectively.
#include <gtest/gtest.h>

#include "spec/engine_fields.hpp"

namespace mist::spec {
namespace {

std::vector<std::string> paths(const std::vector<Error>& es) {
  std::vector<std::string> out;
  for (const auto& e : es) out.push_back(e.path);
  return out;
}

TEST(EngineFields, EachFieldIsRefusedForTheEnginesThatDoNotRunIt) {
  TrainingSpec t;
  EXPECT_TRUE(engine_training_refusals(t, Engine::kTorchtitan).empty());
  t.compile = true;
  EXPECT_TRUE(engine_training_refusals(t, Engine::kTorchtitan).empty());
  EXPECT_EQ(paths(engine_training_refusals(t, Engine::kMegatron)), std::vector<std::string>{"training.compile"});
  t = {};
  t.fp8_param_gather = true;
  t.mtp_layers = 1;
  t.cross_entropy_fusion = CrossEntropyFusion::kNative;
  t.recompute_modules = kRecomputeMoe;
  EXPECT_TRUE(engine_training_refusals(t, Engine::kMegatron).empty());
  const std::vector<std::string> all = {"training.fp8_param_gather", "training.mtp_layers",
                                        "training.cross_entropy_fusion", "training.recompute_modules"};
  for (Engine e : {Engine::kTorchtitan, Engine::kDeepSpeed}) {
    const auto r = engine_training_refusals(t, e);
    EXPECT_EQ(paths(r), all) << to_string(e);
    for (const auto& x : r) EXPECT_NE(x.message.find("only Megatron-LM runs"), std::string::npos) << x.message;
  }
  // torchtitan's own reason for FP8 parameters names the torchao switch it lacks.
  EXPECT_NE(engine_training_refusals(t, Engine::kTorchtitan)[0].message.find("enable_fsdp_float8_all_gather"),
            std::string::npos);
  // The modules only matter to selective recompute: a plan without it drops that refusal.
  EXPECT_EQ(engine_training_refusals(t, Engine::kTorchtitan, false).size(), 3u);
  EXPECT_EQ(engine_training_refusals(t, Engine::kTorchtitan, true).size(), 4u);
}

}  // namespace
}  // namespace mist::spec
