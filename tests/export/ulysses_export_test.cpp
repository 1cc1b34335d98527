// DeepSpeed-Ulysses, Megatron-DeepSpeed's context parallelism: a cp > 1, cp_comm a2a plan exports
// to --ds-sequence-parallel-size and imports back to the same plan; the capability rules turn the
// other exchanges into the all-to-all and fold cp into dp where Megatron-DeepSpeed cannot split
// heads (tp or pp > 1, grouped key/value heads, heads not divisible); the importer's refusals name
// the flag.
#include <algorithm>

#include <gtest/gtest.h>

#include "export/deepspeed.hpp"
#include "export_jobs.hpp"
#include "../common/expect.hpp"

namespace mist::engines {
namespace {

using mist::testing::expect_error;
using testing::cluster;
using testing::command;
using testing::model;
using testing::training;
using testing::value;

const auto kH100 = [] { return cluster(1, 8, "H100-SXM5-80GB"); };

// Llama-2-7B (32 heads, 32 key/value heads) at 128K tokens on 8 GPUs: dp 2 × cp 4, ZeRO-1, every
// block recomputed, 4 micro-batches per data-parallel rank (global batch 8).
plan::Plan ulysses_plan(plan::CpComm comm = plan::CpComm::kAllToAll, int64_t tp = 1, int64_t cp = 4) {
  auto p = testing::plan(8 / (tp * cp), tp, {32}, 1, 8 * tp * cp / 8, /*zero=*/1, /*ckpt=*/32);
  p.cp = cp;
  p.cp_comm = comm;
  p.sequence_parallel = tp > 1;
  return p;
}

bool changed(const Nearest& n, std::string_view path) {
  return std::any_of(n.changes.begin(), n.changes.end(), [&](const auto& c) { return c.starts_with(path); });
}

TEST(UlyssesExport, WritesSequenceParallelSizeAndImportsBackTheSamePlan) {
  const auto m = model("llama2-7b");
  const auto c = kH100();
  const auto t = training(8, 131072);
  // What DeepSpeed runs of the plan (its separate gradient accumulation): the layout stays.
  const auto p = nearest_expressible(ulysses_plan(), Engine::kDeepSpeed, &t, &m).plan;
  ASSERT_EQ(p.cp, 4);
  ASSERT_EQ(p.cp_comm, plan::CpComm::kAllToAll);
  auto r = export_plan(Engine::kDeepSpeed, {m, c, t, p, {}});
  ASSERT_TRUE(r && r->exported) << (r && !r->reasons.empty() ? r->reasons[0].to_string() : "");
  const auto& o = r->exported->options;
  EXPECT_EQ(value(o, "--ds-sequence-parallel-size"), "4");
  EXPECT_EQ(value(o, "--use-flash-attn-v2"), "");  // mist's CP is modelled on flash attention
  EXPECT_EQ(value(o, "--no-pipeline-parallel"), "");
  EXPECT_EQ(value(o, "--tensor-model-parallel-size"), "1");
  EXPECT_FALSE(value(o, "--sequence-parallel").has_value());
  // DeepSpeed's batch counts the data-parallel ranks only (mpu.get_data_parallel_world_size):
  // micro 1 × accumulation 4 × dp 2, not × dp·sp.
  EXPECT_EQ(r->exported->config.at("train_batch_size"), 8);
  EXPECT_EQ(r->exported->config.at("gradient_accumulation_steps"), p.grad_accum_steps);
  EXPECT_EQ(value(o, "--global-batch-size"), "8");
  // The notes say that ZeRO shards over dp·sp, as mist's memory model does (plan::grad_dp).
  const bool noted = std::any_of(r->exported->notes.begin(), r->exported->notes.end(), [](const auto& n) {
    return n.find("dp·sp = 8 ranks") != std::string::npos;
  });
  EXPECT_TRUE(noted);
  auto back = import_deepspeed(r->exported->config, command(o), m, c);
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(back->plan, canonical(p)) << plan::plan_to_json(back->plan).dump();
  EXPECT_EQ(back->training.global_batch_size, 8);
  EXPECT_EQ(back->training.seq_length, 131072);
  // Without a flash flag the import says what Megatron-DeepSpeed would attend with.
  auto no_flash =
      import_deepspeed(r->exported->config, testing::without_token(command(o), " --use-flash-attn-v2"), m, c);
  ASSERT_TRUE(no_flash) << no_flash.error().to_string();
  EXPECT_TRUE(std::any_of(no_flash->notes.begin(), no_flash->notes.end(),
                          [](const auto& n) { return n.find("CoreAttention") != std::string::npos; }));
}

// The ring and the all-gather become the all-to-all, layout kept; nearest is a fixed point.
TEST(UlyssesExport, OtherExchangesBecomeTheAllToAll) {
  const auto m = model("llama2-7b");
  const auto t = training(8, 131072);
  for (auto comm : {plan::CpComm::kRing, plan::CpComm::kAllGather}) {
    const auto p = ulysses_plan(comm);
    std::vector<Error> why;
    EXPECT_FALSE(expressible(p, Engine::kDeepSpeed, &why, &t, &m));
    ASSERT_FALSE(why.empty());
    EXPECT_EQ(why[0].path, "plan.cp_comm");
    EXPECT_NE(why[0].message.find("DeepSpeed-Ulysses"), std::string::npos) << why[0].message;
    const auto n = nearest_expressible(p, Engine::kDeepSpeed, &t, &m);
    EXPECT_EQ(n.plan.cp, 4);
    EXPECT_EQ(n.plan.dp, 2);
    EXPECT_EQ(n.plan.cp_comm, plan::CpComm::kAllToAll);
    EXPECT_TRUE(changed(n, "plan.cp_comm"));
    EXPECT_EQ(nearest_expressible(n.plan, Engine::kDeepSpeed, &t, &m).plan, n.plan);
    EXPECT_TRUE(expressible(n.plan, Engine::kDeepSpeed, nullptr, &t, &m));
  }
}

// Where the heads cannot be split the CP ranks become data-parallel ranks, the global batch kept,
// and the reason says which rule: tp > 1 (initialize_model_parallel), grouped key/value heads
// (ParallelAttention), cp not dividing the heads (check_cp's a2a rule).
TEST(UlyssesExport, FoldsCpIntoDataParallelismWhereHeadsCannotBeSplit) {
  const auto t = training(8, 131072);
  auto llama2_13b = testing::plan(1, 1, {40}, 1, 16, /*zero=*/1, /*ckpt=*/40);  // 40 heads: cp 16 does not divide
  llama2_13b.cp = 16;
  struct Case {
    std::string model;
    plan::Plan p;
    std::string says;
  };
  const Case cases[] = {
      {"llama2-7b", ulysses_plan(plan::CpComm::kAllToAll, /*tp=*/2, /*cp=*/2), "tensor or pipeline"},
      {"llama3-8b", ulysses_plan(plan::CpComm::kAllToAll), "8 for 32"},
      {"llama2-13b", llama2_13b, "cp must divide"},
  };
  for (const auto& [name, p, says] : cases) {
    SCOPED_TRACE(name);
    const auto m = model(name);
    std::vector<Error> why;
    EXPECT_FALSE(expressible(p, Engine::kDeepSpeed, &why, &t, &m));
    ASSERT_FALSE(why.empty());
    EXPECT_EQ(why[0].path, "plan.cp");
    EXPECT_NE(why[0].message.find(says), std::string::npos) << why[0].message;
    const auto n = nearest_expressible(p, Engine::kDeepSpeed, &t, &m).plan;
    EXPECT_EQ(n.cp, 1);
    EXPECT_EQ(n.cp_comm, plan::CpComm::kRing);
    EXPECT_EQ(n.dp, p.dp * p.cp);
    EXPECT_EQ(n.tp, p.tp);
    EXPECT_EQ(n.micro_batch_size * n.grad_accum_steps * n.dp, p.micro_batch_size * p.grad_accum_steps * p.dp);
  }
  // 40 heads split over cp 8 (5 each): there Llama-2-13B runs Ulysses.
  auto eight = llama2_13b;
  eight.cp = 8;
  eight.dp = 2;
  eight.grad_accum_steps = 4;
  const auto m13 = model("llama2-13b");
  EXPECT_EQ(nearest_expressible(eight, Engine::kDeepSpeed, &t, &m13).plan.cp, 8);
  // A plan whose sequences per rank do not split over cp keeps its cp, and the reason stays.
  auto odd = ulysses_plan(plan::CpComm::kAllToAll, /*tp=*/2, /*cp=*/4);
  odd.dp = 1;
  odd.grad_accum_steps = 3;
  std::vector<Error> why;
  EXPECT_FALSE(expressible(nearest_expressible(odd, Engine::kDeepSpeed, &t).plan, Engine::kDeepSpeed, &why, &t));
  ASSERT_FALSE(why.empty());
  EXPECT_EQ(why[0].path, "plan.cp");
}

TEST(UlyssesExport, ImportRefusalsNameTheFlag) {
  const auto c = kH100();
  const auto t = training(8, 131072);
  const auto m = model("llama2-7b");
  const auto p = nearest_expressible(ulysses_plan(), Engine::kDeepSpeed, &t, &m).plan;
  auto r = export_plan(Engine::kDeepSpeed, {m, c, t, p, {}});
  ASSERT_TRUE(r && r->exported);
  const Json& config = r->exported->config;
  const std::string cmd = command(r->exported->options);
  auto replaced = [](std::string s, const std::string& from, const std::string& to) {
    const size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) s.replace(at, from.size(), to);
    return s;
  };
  const std::string sp4 = "--ds-sequence-parallel-size 4";
  const std::string tp2 = replaced(cmd, "--tensor-model-parallel-size 1", "--tensor-model-parallel-size 2");
  expect_error(import_deepspeed(config, tp2, m, c), "--ds-sequence-parallel-size", "without either");
  expect_error(import_deepspeed(config, testing::without_token(cmd, " --no-pipeline-parallel"), m, c),
               "--ds-sequence-parallel-size", "--no-pipeline-parallel");
  expect_error(import_deepspeed(config, replaced(cmd, sp4, "--ds-sequence-parallel-size 3"), m, c),
               "--ds-sequence-parallel-size", "32 heads");
  expect_error(import_deepspeed(config, replaced(cmd, sp4, "--ds-sequence-parallel-size 16"), m, c),
               "--ds-sequence-parallel-size", "8 GPUs");
  // Llama-3-8B's grouped key/value heads (its own shape flags, the same parallel flags).
  std::string gqa = replaced(cmd, "--ffn-hidden-size 11008", "--ffn-hidden-size 14336");
  gqa = replaced(gqa, "--num-attention-heads 32", "--num-attention-heads 32 --num-key-value-heads 8");
  expect_error(import_deepspeed(config, gqa, model("llama3-8b"), c), "--ds-sequence-parallel-size",
               "8 key/value heads");
}

}  // namespace
}  // namespace mist::engines
