// The loss kernel (training.cross_entropy_fusion; Megatron's --cross-entropy-loss-fusion and
// --cross-entropy-fusion-impl): Transformer Engine's fused cross entropy keeps the bf16 logits,
// with the gradient written into them, where Megatron's kernels keep an fp32 copy and the target
// ids and mask; Megatron's native fusion runs the same statements and keeps the same tensors.
#include <gtest/gtest.h>

#include "analysis/prepared_job.hpp"
#include "test_jobs.hpp"
#include "../common/expect.hpp"

namespace mist::analysis {
namespace {

using mist::testing::cluster;
using spec::CrossEntropyFusion;

// Llama 3 8B on 8 H100, pp 2: the last stage holds the head (V = 128,256).
struct Job {
  spec::ModelSpec m = *spec::catalog_model("llama3-8b");
  spec::ClusterSpec c = cluster("H100-SXM5-80GB", 1, 8);
  plan::Plan plan() const {
    plan::StagePlan st;
    st.zero = 1;
    return plan::uniform_plan(m, 4, 1, 2, 1, 8, st);
  }
  spec::TrainingSpec training(CrossEntropyFusion f) const {
    auto t = mist::testing::training(32, 8192, spec::Dtype::kBf16, true, false, spec::Dtype::kBf16);
    t.cross_entropy_fusion = f;
    return t;
  }
  MemoryPrediction memory(CrossEntropyFusion f) const {
    auto r = mist::testing::memory_of(m, c, training(f), plan());
    EXPECT_TRUE(r) << r.error().to_string();
    return r ? *r : MemoryPrediction{};
  }
};

TEST(CrossEntropyFusion, TransformerEnginesKernelKeepsTheBf16LogitsOnly) {
  const Job job;
  const auto none = job.memory(CrossEntropyFusion::kNone), native = job.memory(CrossEntropyFusion::kNative),
             te = job.memory(CrossEntropyFusion::kTe);
  ASSERT_EQ(te.stages.size(), 2u);
  // The first stage has no head: nothing changes there.
  EXPECT_DOUBLE_EQ(te.stages[0].peak_bytes, none.stages[0].peak_bytes);
  EXPECT_DOUBLE_EQ(native.stages[1].peak_bytes, none.stages[1].peak_bytes);
  // The last stage keeps s·V·2 bytes of logits instead of s·V·4 and the 9-byte target ids and mask
  // a token: 2 GiB less for one micro-batch of 8,192 tokens.
  const double n = 8192.0, V = 128256.0;
  const double head_saved_less = n * V * 4 + n * 9 - n * V * 2;
  EXPECT_GT(none.stages[1].peak_bytes - te.stages[1].peak_bytes, 0.9 * head_saved_less);
  EXPECT_LE(none.stages[1].peak_bytes - te.stages[1].peak_bytes, n * V * 6 + n * 9);
}

TEST(CrossEntropyFusion, ReadWrittenAndRefusedWhereItCannotRun) {
  auto parsed = spec::training_from_json(
      Json{{"global_batch_size", 8}, {"seq_length", 64}, {"cross_entropy_fusion", "te"}}, "training");
  ASSERT_TRUE(parsed) << parsed.error().to_string();
  EXPECT_EQ(parsed->cross_entropy_fusion, CrossEntropyFusion::kTe);
  EXPECT_EQ(spec::training_to_json(*parsed).at("cross_entropy_fusion"), "te");
  auto back = spec::training_from_json(spec::training_to_json(*parsed), "training");
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, *parsed);
  mist::testing::expect_error(
      spec::training_from_json(Json{{"global_batch_size", 8}, {"seq_length", 64}, {"cross_entropy_fusion", "triton"}},
                               "training"),
      "training.cross_entropy_fusion", "");
  const Job job;
  for (auto e : {spec::Engine::kTorchtitan, spec::Engine::kDeepSpeed})
    mist::testing::expect_error(PreparedJob::create(job.m, job.c, job.training(CrossEntropyFusion::kNative), {}, {}, e),
                                "training.cross_entropy_fusion", "--engine megatron");
}

}  // namespace
}  // namespace mist::analysis
