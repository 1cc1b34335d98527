// Megatron-LM: exact flags for a set of plans, refusals, and import errors that name the flag.
#include <gtest/gtest.h>

#include "export/megatron.hpp"
#include "export/splits.hpp"
#include "export_jobs.hpp"
#include "../common/expect.hpp"

namespace mist::engines {
namespace {

using testing::cluster;
using testing::command;
using testing::value;
using testing::model;
using testing::training;
using mist::testing::expect_error;

std::vector<Option> flags(std::initializer_list<std::pair<const char*, const char*>> list) {
  std::vector<Option> out;
  for (auto [n, v] : list) out.push_back({n, v ? std::optional<std::string>(v) : std::nullopt});
  return out;
}

std::vector<Option> exported(const spec::ModelSpec& m, const spec::ClusterSpec& c, const spec::TrainingSpec& t,
                             const plan::Plan& p) {
  auto r = export_plan(Engine::kMegatron, {m, c, t, p, {}});
  EXPECT_TRUE(r) << (r ? "" : r.error().to_string());
  if (!r || !r->exported) {
    ADD_FAILURE() << "refused: " << (r && !r->reasons.empty() ? r->reasons[0].to_string() : "");
    return {};
  }
  return r->exported->options;
}

const auto kGpt13bShape = flags({{"--num-layers", "40"},
                                 {"--hidden-size", "5120"},
                                 {"--ffn-hidden-size", "20480"},
                                 {"--num-attention-heads", "40"},
                                 {"--max-position-embeddings", "2048"}});

std::vector<Option> concat(std::vector<Option> a, const std::vector<Option>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(Megatron, TheExampleGpt13bPlanWithOneRecomputeCount) {
  // 2 nodes × 8 A100: TP 4, PP 2, DP 2, distributed optimizer, 6 recomputed blocks on each stage.
  auto p = testing::plan(2, 4, {20, 20}, 2, 128, /*zero=*/1, /*ckpt=*/6);
  p.sequence_parallel = true;
  auto got = exported(model("gpt3-13b"), cluster(2, 8), training(512, 2048), p);
  EXPECT_EQ(got, concat(flags({{"--tensor-model-parallel-size", "4"},
                               {"--pipeline-model-parallel-size", "2"},
                               {"--sequence-parallel", nullptr},
                               {"--micro-batch-size", "2"},
                               {"--global-batch-size", "512"},
                               {"--seq-length", "2048"},
                               {"--recompute-granularity", "full"},
                               {"--recompute-method", "block"},
                               {"--recompute-num-layers", "6"},
                               {"--use-distributed-optimizer", nullptr},
                               {"--overlap-grad-reduce", nullptr},
                               {"--overlap-param-gather", nullptr},
                               {"--bf16", nullptr},
                               {"--optimizer", "adam"},
                               {"--hidden-dropout", "0"},
                               {"--attention-dropout", "0"}}),
                        kGpt13bShape));
}

TEST(Megatron, UnevenFirstLastStagesZero3AndOptimizerOffload) {
  // Llama 3 8B on 8 GPUs: TP 2, PP 4 with 7 | 9 | 9 | 7 blocks, Megatron-FSDP ZeRO-3, half the
  // optimizer states in host memory.
  auto p = testing::plan(1, 2, {7, 9, 9, 7}, 1, 256, /*zero=*/3);
  for (auto& s : p.stages) s.offload.optimizer_states = 0.5;
  p.overlap_param_gather = false;
  auto got = exported(model("llama3-8b"), cluster(1, 8), training(256, 4096), p);
  EXPECT_EQ(got, flags({{"--tensor-model-parallel-size", "2"},
                        {"--pipeline-model-parallel-size", "4"},
                        {"--decoder-first-pipeline-num-layers", "7"},
                        {"--decoder-last-pipeline-num-layers", "7"},
                        {"--micro-batch-size", "1"},
                        {"--global-batch-size", "256"},
                        {"--seq-length", "4096"},
                        {"--use-megatron-fsdp", nullptr},
                        {"--data-parallel-sharding-strategy", "optim_grads_params"},
                        {"--ckpt-format", "fsdp_dtensor"},
                        {"--overlap-grad-reduce", nullptr},
                        {"--optimizer-cpu-offload", nullptr},
                        {"--use-precision-aware-optimizer", nullptr},
                        {"--optimizer-offload-fraction", "0.5"},
                        {"--bf16", nullptr},
                        {"--optimizer", "adam"},
                        {"--hidden-dropout", "0"},
                        {"--attention-dropout", "0"},
                        {"--num-layers", "32"},
                        {"--hidden-size", "4096"},
                        {"--ffn-hidden-size", "14336"},
                        {"--num-attention-heads", "32"},
                        {"--group-query-attention", nullptr},
                        {"--num-query-groups", "8"},
                        {"--max-position-embeddings", "8192"},
                        {"--normalization", "RMSNorm"},
                        {"--swiglu", nullptr},
                        {"--position-embedding-type", "rope"},
                        {"--untie-embeddings-and-output-weights", nullptr},
                        {"--disable-bias-linear", nullptr}}));
}

// The gradients' dtype as Megatron-LM derives it (arguments.py validate_args at d98e8a64): fp16
// keeps fp16 main gradients unless --accumulate-allreduce-grads-in-fp32, bf16 fp32 ones unless
// --grad-reduce-in-bf16. The export writes a flag only where the plan's dtype is not that default;
// the import states the dtype the flags give, and refuses the bf16 flag without --bf16.
TEST(Megatron, GradientDtypeFlagsFollowMegatronsDefaults) {
  const auto m = model("gpt3-13b");
  const auto p = testing::plan(2, 2, {20, 20}, 1, 256, /*zero=*/1);
  struct Row {
    spec::Dtype precision, grads;
    const char* flag;  // nullptr: none
  };
  for (const Row& r : {Row{spec::Dtype::kFp16, spec::Dtype::kFp32, "--accumulate-allreduce-grads-in-fp32"},
                       Row{spec::Dtype::kFp16, spec::Dtype::kFp16, nullptr},
                       Row{spec::Dtype::kBf16, spec::Dtype::kFp32, nullptr},
                       Row{spec::Dtype::kBf16, spec::Dtype::kBf16, "--grad-reduce-in-bf16"}}) {
    auto t = training(512, 2048, r.precision);
    t.grad_dtype = r.grads;
    auto e = export_plan(Engine::kMegatron, {m, cluster(1, 8), t, p, {}});
    ASSERT_TRUE(e && e->exported);
    const auto& o = e->exported->options;
    for (const char* flag : {"--accumulate-allreduce-grads-in-fp32", "--grad-reduce-in-bf16"})
      EXPECT_EQ(value(o, flag).has_value(), r.flag && std::string(r.flag) == flag) << flag;
    auto back = import_megatron_flags(command(o), m, cluster(1, 8));
    ASSERT_TRUE(back) << back.error().to_string();
    ASSERT_TRUE(back->training.grad_dtype.has_value());
    EXPECT_EQ(*back->training.grad_dtype, r.grads) << spec::to_string(r.precision);
  }
  expect_error(import_megatron_flags("--micro-batch-size 1 --fp16 --grad-reduce-in-bf16", m, cluster(1, 8)),
               "--grad-reduce-in-bf16", "needs --bf16");
}

TEST(Megatron, ArbitrarySplitWithVirtualStagesUsesTheLayout) {
  // 8 | 12 | 10 | 10 blocks in 2 chunks per stage: entry a·pp + b is chunk a of stage b.
  auto p = testing::plan(2, 2, {8, 12, 10, 10}, 1, 256, /*zero=*/2);
  p.virtual_pipeline_stages = 2;
  p.overlap_grad_reduce = false;
  p.overlap_param_gather = false;
  auto got = exported(model("gpt3-13b"), cluster(2, 8), training(512, 2048, spec::Dtype::kFp16), p);
  auto expected = flags({{"--tensor-model-parallel-size", "2"},
                         {"--pipeline-model-parallel-size", "4"},
                         {"--pipeline-model-parallel-layout", "Et*4|t*6|t*5|t*5|t*4|t*6|t*5|t*5L"},
                         {"--micro-batch-size", "1"},
                         {"--global-batch-size", "512"},
                         {"--seq-length", "2048"},
                         {"--use-megatron-fsdp", nullptr},
                         {"--data-parallel-sharding-strategy", "optim_grads"},
                         {"--ckpt-format", "fsdp_dtensor"},
                         {"--fp16", nullptr},
                         {"--optimizer", "adam"},
                         {"--hidden-dropout", "0"},
                         {"--attention-dropout", "0"},
                         {"--accumulate-allreduce-grads-in-fp32", nullptr}});  // fp16 with fp32 gradients
  EXPECT_EQ(got, concat(expected, kGpt13bShape));
  auto ll = megatron_layers_from_layout("Et*4|t*6|t*5|t*5|t*4|t*6|t*5|t*5L", 4, 40);
  ASSERT_TRUE(ll);
  EXPECT_EQ(ll->layers, (std::vector<int64_t>{8, 12, 10, 10}));
  EXPECT_EQ(ll->virtual_stages, 2);
}

TEST(Megatron, ActivationOffloadBySelectiveAndVirtualStagesByCount) {
  // One stage, a quarter of the 24 blocks' activations offloaded: 6 blocks.
  auto p = testing::plan(1, 2, {24}, 4, 8);
  p.stages[0].offload.activations = 0.25;
  auto got = exported(model("mist-gpt-1.3b"), cluster(1, 2), training(32, 1024, spec::Dtype::kFp32), p);
  ASSERT_GE(got.size(), 7u);
  EXPECT_EQ(std::vector<Option>(got.begin(), got.begin() + 7),
            flags({{"--tensor-model-parallel-size", "2"},
                   {"--pipeline-model-parallel-size", "1"},
                   {"--micro-batch-size", "4"},
                   {"--global-batch-size", "32"},
                   {"--seq-length", "1024"},
                   {"--overlap-grad-reduce", nullptr},
                   {"--cpu-offloading-num-layers", "6"}}));
  // Selective recompute and even interleaving.
  auto q = testing::plan(2, 4, {20, 20}, 2, 128, 1);
  q.recompute = plan::Recompute::kSelective;
  q.virtual_pipeline_stages = 5;
  q.overlap_tp_comm = q.sequence_parallel = true;
  auto got2 = exported(model("gpt3-13b"), cluster(2, 8), training(512, 2048), q);
  ASSERT_GE(got2.size(), 12u);
  EXPECT_EQ(std::vector<Option>(got2.begin(), got2.begin() + 12),
            flags({{"--tensor-model-parallel-size", "4"},
                   {"--pipeline-model-parallel-size", "2"},
                   {"--sequence-parallel", nullptr},
                   {"--num-virtual-stages-per-pipeline-rank", "5"},
                   {"--micro-batch-size", "2"},
                   {"--global-batch-size", "512"},
                   {"--seq-length", "2048"},
                   {"--recompute-granularity", "selective"},
                   {"--use-distributed-optimizer", nullptr},
                   {"--overlap-grad-reduce", nullptr},
                   {"--overlap-param-gather", nullptr},
                   {"--tp-comm-overlap", nullptr}}));
}

TEST(Megatron, RefusesWhatItCannotRunAndNamesTheField) {
  const auto m = model("gpt3-13b");
  const auto c = cluster(2, 8);
  const auto t = training(512, 2048);
  auto p = testing::plan(2, 4, {20, 20}, 2, 128, 1, 6);
  p.stages[1].zero = 2;          // per-stage ZeRO
  p.stages[1].ckpt_layers = 2;   // a second recompute count
  p.stages[0].offload.weights = 0.5;
  p.stages[1].offload.activations = 0.2;
  auto r = export_plan(Engine::kMegatron, {m, c, t, p, {}});
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->exported);
  std::vector<std::string> paths;
  for (const auto& e : r->reasons) paths.push_back(e.path);
  EXPECT_EQ(paths, (std::vector<std::string>{"plan.stages[0].zero", "plan.stages[0].offload.weights",
                                             "plan.stages[1].ckpt_layers", "plan.stages[1].offload.activations"}));
  ASSERT_TRUE(r->nearest);
  const auto& n = r->nearest->plan;
  EXPECT_EQ(n.stages[0].zero, 2);
  EXPECT_EQ(n.stages[1].zero, 2);
  EXPECT_EQ(n.stages[0].offload.weights, 0);
  EXPECT_EQ(n.stages[1].ckpt_layers, 6);  // the larger count
  EXPECT_EQ(n.stages[1].offload.activations, 0);
  EXPECT_EQ(r->nearest->changes.size(), 4u);
  EXPECT_TRUE(expressible(n, Engine::kMegatron, nullptr, &t));
}

TEST(Megatron, RecomputeCountsPerChunk) {
  // Block recompute counts the first N blocks of every model chunk: 2 chunks of 6 and 4 blocks.
  auto p = testing::plan(2, 4, {12, 8}, 2, 128);
  p.virtual_pipeline_stages = 2;
  p.stages[0].ckpt_layers = 10;  // needs N = 5: 2·min(5, 6) = 10 and 2·min(5, 4) = 8
  p.stages[1].ckpt_layers = 8;
  EXPECT_EQ(megatron_recompute_count(p), 5);
  EXPECT_EQ(megatron_ckpt_layers(p, 5), (std::vector<int64_t>{10, 8}));
  EXPECT_TRUE(expressible(p, Engine::kMegatron));
  p.stages[1].ckpt_layers = 6;
  EXPECT_FALSE(expressible(p, Engine::kMegatron));
}

TEST(Megatron, SelectiveWithFullOptimizerOffloadWithSgdAndTheGatherWithoutReduce) {
  auto t = training(512, 2048);
  t.optimizer = spec::Optimizer::kSgd;
  auto p = testing::plan(2, 4, {20, 20}, 2, 128, 0, 4);
  p.recompute = plan::Recompute::kSelective;
  for (auto& s : p.stages) s.offload.optimizer_states = 1;
  std::vector<Error> why;
  EXPECT_FALSE(expressible(p, Engine::kMegatron, &why, &t));
  ASSERT_EQ(why.size(), 2u);
  EXPECT_EQ(why[0].path, "plan.stages[0].offload.optimizer_states");
  EXPECT_NE(why[0].message.find("Adam"), std::string::npos);
  EXPECT_EQ(why[1].path, "plan.recompute");
  // With Adam, offload raises the ZeRO level to the distributed optimizer instead.
  t.optimizer = spec::Optimizer::kAdamW;
  p.recompute = plan::Recompute::kNone;
  auto n = nearest_expressible(p, Engine::kMegatron, &t);
  EXPECT_EQ(n.plan.stages[0].zero, 1);
  EXPECT_EQ(n.plan.stages[0].offload.optimizer_states, 1);
  auto q = testing::plan(2, 4, {20, 20}, 2, 128, 1);
  q.overlap_grad_reduce = false;
  EXPECT_FALSE(expressible(q, Engine::kMegatron, &why));
  EXPECT_EQ(why.at(0).path, "plan.overlap_param_gather");
}

TEST(Megatron, ImportsARealCommandLine) {
  const std::string cmd = R"(torchrun --nproc_per_node 8 --nnodes 2 pretrain_gpt.py \
      --tensor-model-parallel-size 4 --pipeline-model-parallel-size=2 --sequence-parallel \
      --num-layers 40 --hidden-size 5120 --num-attention-heads 40 --seq-length 2048 \
      --max-position-embeddings 2048 --micro-batch-size 2 --global-batch-size 512 \
      --decoder-first-pipeline-num-layers 18 --recompute-granularity full --recompute-method block \
      --recompute-num-layers 4 --use-distributed-optimizer --overlap-grad-reduce --bf16 \
      --lr 6.0e-5 --data-path "/data/my corpus_text_document" --split 949,50,1)";
  auto r = import_megatron_flags(cmd, model("gpt3-13b"), cluster(2, 8));
  ASSERT_TRUE(r) << r.error().to_string();
  const auto& p = r->plan;
  EXPECT_EQ(p.dp, 2);
  EXPECT_EQ(p.tp, 4);
  EXPECT_EQ(p.pp, 2);
  EXPECT_TRUE(p.sequence_parallel);
  EXPECT_EQ(p.grad_accum_steps, 128);
  ASSERT_EQ(p.stages.size(), 2u);
  EXPECT_EQ(p.stages[0].num_layers, 18);
  EXPECT_EQ(p.stages[1].num_layers, 22);
  EXPECT_EQ(p.stages[0].ckpt_layers, 4);
  EXPECT_EQ(p.stages[1].ckpt_layers, 4);
  EXPECT_EQ(p.stages[1].zero, 1);
  EXPECT_TRUE(p.overlap_grad_reduce);
  EXPECT_FALSE(p.overlap_param_gather);
  EXPECT_TRUE(p.grad_accumulation_fusion);  // Megatron's default
  EXPECT_EQ(r->training.global_batch_size, 512);
  EXPECT_EQ(r->training.seq_length, 2048);
  EXPECT_EQ(r->training.precision, spec::Dtype::kBf16);
  EXPECT_EQ(r->training.dropout, true);  // Megatron's 0.1 defaults
  ASSERT_FALSE(r->notes.empty());
  EXPECT_NE(r->notes.back().find("--lr, --data-path, --split"), std::string::npos) << r->notes.back();
}

// Megatron-LM 2021 (and --no-gradient-accumulation-fusion today) adds each micro-batch's gradients
// with a separate kernel; the plan carries it both ways.
TEST(Megatron, UnfusedGradientAccumulationBothWays) {
  auto p = testing::plan(2, 4, {20, 20}, 2, 128, /*zero=*/1);
  p.grad_accumulation_fusion = false;
  const auto got = exported(model("gpt3-13b"), cluster(2, 8), training(512, 2048), p);
  std::string cmd;
  int found = 0;
  for (const auto& o : got) {
    cmd += " " + o.name + (o.value ? " " + *o.value : "");
    found += o.name == "--no-gradient-accumulation-fusion";
  }
  EXPECT_EQ(found, 1);
  auto back = import_megatron_flags(cmd, model("gpt3-13b"), cluster(2, 8));
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_FALSE(back->plan.grad_accumulation_fusion);
}

// Megatron-Core always launches the backward TP collectives asynchronously: a plan without it is
// moved to it, with the reason.
TEST(Megatron, AsynchronousTensorParallelBackwardIsAlwaysOn) {
  auto p = testing::plan(2, 4, {20, 20}, 2, 128, /*zero=*/1);
  p.async_tp_backward = false;
  std::vector<Error> why;
  EXPECT_FALSE(expressible(p, Engine::kMegatron, &why));
  ASSERT_EQ(why.size(), 1u);
  EXPECT_EQ(why[0].path, "plan.async_tp_backward");
  EXPECT_TRUE(nearest_expressible(p, Engine::kMegatron).plan.async_tp_backward);
  p.tp = 1;  // nothing to overlap: expressible either way
  p.dp = 8;
  EXPECT_TRUE(expressible(p, Engine::kMegatron));
}

TEST(Megatron, ImportErrorsNameTheFlag) {
  const auto m = model("gpt3-13b");
  const auto c = cluster(2, 8);
  auto error_path = [&](const std::string& flags) {
    auto r = import_megatron_flags(flags, m, c);
    return r ? std::string("ok") : r.error().path;
  };
  EXPECT_EQ(error_path("--tensor-model-parallel-size 4"), "--micro-batch-size");  // required
  EXPECT_EQ(error_path("--micro-batch-size two"), "--micro-batch-size");
  EXPECT_EQ(error_path("--micro-batch-size 1 --tensor-model-parallel-size 3"), "--tensor-model-parallel-size");
  EXPECT_EQ(error_path("--micro-batch-size 3 --global-batch-size 512"), "--global-batch-size");
  EXPECT_EQ(error_path("--micro-batch-size 1 --num-layers 48"), "--num-layers");
  EXPECT_EQ(error_path("--micro-batch-size 1 --pipeline-model-parallel-size 3"), "--pipeline-model-parallel-size");
  EXPECT_EQ(error_path("--micro-batch-size 1 --pipeline-model-parallel-size 16"), "--pipeline-model-parallel-size");
  EXPECT_EQ(error_path("--micro-batch-size 1 --context-parallel-size 3"), "--context-parallel-size");
  EXPECT_EQ(error_path("--micro-batch-size 1 --context-parallel-size 2 --cp-comm-type a2a+p2p"),
            "--hierarchical-context-parallel-sizes");
  EXPECT_EQ(error_path("--micro-batch-size 1 --context-parallel-size 2 --cp-comm-type ring"), "--cp-comm-type");
  EXPECT_EQ(error_path("--micro-batch-size 1 --recompute-granularity full"), "--recompute-method");
  EXPECT_EQ(error_path("--micro-batch-size 1 --recompute-granularity partial"), "--recompute-granularity");
  EXPECT_EQ(error_path("--micro-batch-size 1 --pipeline-model-parallel-size 2 --cpu-offloading-num-layers 2"),
            "--cpu-offloading-num-layers");
  EXPECT_EQ(error_path("--micro-batch-size 1 --optimizer-cpu-offload --use-distributed-optimizer"),
            "--optimizer-cpu-offload");
  EXPECT_EQ(error_path("--micro-batch-size 1 --pipeline-model-parallel-size 2 "
                       "--pipeline-model-parallel-layout 'Et*20|t*19L'"),
            "--pipeline-model-parallel-layout");
  EXPECT_EQ(error_path("--micro-batch-size 1 --sequence-parallel=yes"), "--sequence-parallel");
  EXPECT_EQ(error_path("--micro-batch-size 1 --bf16 --fp16"), "--fp16");
  EXPECT_EQ(error_path("--micro-batch-size 1 --seq-length"), "--seq-length");
  EXPECT_EQ(error_path("--micro-batch-size 1 --data-path 'unterminated"), "--from-megatron");
}

// Megatron's --account-for-embedding/loss-in-pipeline-split (TransformerConfig, transformer_block.py
// get_num_layers_to_build at d98e8a64): the embedding and the loss count as layers of the even
// split, their stages build one block fewer; with interleaving that makes one chunk shorter than the
// stage's others, which mist's plans cannot state, so it is refused, naming the flag. Before
// 2026-12-07 both flags were ignored as options that "do not change the plan".
TEST(Megatron, AccountForEmbeddingAndLossInThePipelineSplit) {
  // Llama 3 8B (32 blocks) over 17 stages is uneven; counting the embedding and the loss, 34 are not.
  auto totals = [](int64_t l, int64_t pp, bool e, bool loss) {
    return stage_totals(*megatron_layers_accounting(l, pp, e, loss, 1));
  };
  EXPECT_EQ(totals(30, 4, true, true), (std::vector<int64_t>{7, 8, 8, 7}));
  EXPECT_EQ(totals(31, 4, true, false), (std::vector<int64_t>{7, 8, 8, 8}));
  EXPECT_EQ(totals(31, 4, false, true), (std::vector<int64_t>{8, 8, 8, 7}));
  EXPECT_EQ(totals(32, 1, true, true), (std::vector<int64_t>{32}));
  auto uneven = megatron_layers_accounting(32, 4, true, true, 1);  // 34 over 4
  ASSERT_FALSE(uneven);
  EXPECT_EQ(uneven.error().path, "--account-for-embedding-in-pipeline-split");
  // Llama 3.1 405B's recipe (126 blocks, pp 16, 4 chunks): 128 / 16 = 8 a stage, 2 a chunk; the
  // first stage's first chunk and the last stage's last build one.
  auto interleaved = megatron_layers_accounting(126, 16, true, true, 4);
  ASSERT_TRUE(interleaved) << interleaved.error().to_string();
  EXPECT_EQ(interleaved->front(), (std::vector<int64_t>{1, 2, 2, 2}));
  EXPECT_EQ((*interleaved)[7], (std::vector<int64_t>{2, 2, 2, 2}));
  EXPECT_EQ(interleaved->back(), (std::vector<int64_t>{2, 2, 2, 1}));
  auto odd = megatron_layers_accounting(124, 16, true, true, 4);  // 126 / 16 is not whole
  ASSERT_FALSE(odd);
  auto chunks = megatron_layers_accounting(118, 12, true, false, 4);  // 119 over 12: not whole either
  ASSERT_FALSE(chunks);
  auto ten = megatron_layers_accounting(58, 6, true, true, 4);  // 60 / 6 = 10 a stage, not 4 chunks
  ASSERT_FALSE(ten);
  EXPECT_NE(ten.error().message.find("10 layers a stage do not split into 4 virtual stages"), std::string::npos)
      << ten.error().message;
  EXPECT_FALSE(megatron_layers_accounting(3, 4, true, true, 1));  // a stage without a block

  const auto m = model("llama3-8b");
  auto r = import_megatron_flags("--micro-batch-size 1 --pipeline-model-parallel-size 2 --num-layers 32 "
                                 "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split",
                                 m, cluster(1, 8));
  ASSERT_TRUE(r) << r.error().to_string();
  ASSERT_EQ(r->plan.stages.size(), 2u);
  EXPECT_EQ(r->plan.stages[0].num_layers, 16);
  EXPECT_EQ(r->plan.stages[1].num_layers, 16);
  r = import_megatron_flags("--micro-batch-size 1 --pipeline-model-parallel-size 2 --num-layers 32 "
                            "--account-for-embedding-in-pipeline-split --decoder-first-pipeline-num-layers 15",
                            m, cluster(1, 8));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().path, "--account-for-embedding-in-pipeline-split");
  r = import_megatron_flags("--micro-batch-size 1 --pipeline-model-parallel-size 2 --num-layers 32 "
                            "--account-for-loss-in-pipeline-split --num-virtual-stages-per-pipeline-rank 2",
                            m, cluster(1, 8));
  ASSERT_FALSE(r);  // 33 layers over 2 stages
  EXPECT_EQ(r.error().path, "--account-for-loss-in-pipeline-split");
}

// With interleaving the accounting flags make the first stage's first chunk and the last stage's
// last one block shorter (plan.stages[i].chunk_layers); export writes the flags back for that
// pattern and a layout for any other, and both read back to the same plan. Before 2026-12-07 the
// flags were refused with virtual stages.
TEST(Megatron, ChunksOfUnequalSizeRoundTrip) {
  const auto m = model("llama3-405b");  // 126 blocks
  auto r = import_megatron_flags("--micro-batch-size 1 --tensor-model-parallel-size 8 --sequence-parallel "
                                 "--pipeline-model-parallel-size 8 --num-virtual-stages-per-pipeline-rank 8 "
                                 "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split "
                                 "--global-batch-size 64",
                                 m, cluster(8, 8, "H100-SXM5-80GB"));
  ASSERT_TRUE(r) << r.error().to_string();
  const plan::Plan& p = r->plan;
  EXPECT_EQ(p.virtual_pipeline_stages, 8);
  EXPECT_EQ(p.stages[0].num_layers, 15);
  EXPECT_EQ(p.stages[0].chunk_layers, (std::vector<int64_t>{1, 2, 2, 2, 2, 2, 2, 2}));
  EXPECT_TRUE(p.stages[3].chunk_layers.empty());  // 16 in 8 equal chunks
  EXPECT_EQ(p.stages[7].chunk_layers, (std::vector<int64_t>{2, 2, 2, 2, 2, 2, 2, 1}));
  const auto t = training(64, 8192);
  ASSERT_TRUE(plan::validate_plan(p, m, cluster(8, 8, "H100-SXM5-80GB"), t));
  auto out = export_plan(Engine::kMegatron, {m, cluster(8, 8, "H100-SXM5-80GB"), t, p, {}});
  ASSERT_TRUE(out && out->exported);
  const auto& o = out->exported->options;
  EXPECT_TRUE(value(o, "--account-for-embedding-in-pipeline-split").has_value());
  EXPECT_TRUE(value(o, "--account-for-loss-in-pipeline-split").has_value());
  EXPECT_EQ(value(o, "--num-virtual-stages-per-pipeline-rank"), "8");
  EXPECT_FALSE(value(o, "--pipeline-model-parallel-layout").has_value());
  auto back = import_megatron_flags(command(o), m, cluster(8, 8, "H100-SXM5-80GB"));
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(back->plan.stages, p.stages);
  // Full recompute of the first 2 blocks of every chunk: the first stage's one-block chunk
  // recomputes its one, so 15 of its 15 (an equal split's 15 / 8 per chunk would say 8).
  auto rc = import_megatron_flags(command(o) + " --recompute-granularity full --recompute-method block "
                                              "--recompute-num-layers 2",
                                  m, cluster(8, 8, "H100-SXM5-80GB"));
  ASSERT_TRUE(rc) << rc.error().to_string();
  EXPECT_EQ(rc->plan.stages[0].ckpt_layers, 15);
  EXPECT_EQ(rc->plan.stages[3].ckpt_layers, 16);
  auto one = p;
  for (auto& s : one.stages) s.ckpt_layers = 8;  // 1 a chunk
  auto rco = export_plan(Engine::kMegatron, {m, cluster(8, 8, "H100-SXM5-80GB"), t, one, {}});
  ASSERT_TRUE(rco && rco->exported);
  EXPECT_EQ(value(rco->exported->options, "--recompute-num-layers"), "1");

  // Any other pattern goes out as a layout: Llama 3 8B with a short first chunk and a long last one.
  const auto small = model("llama3-8b");
  auto l = import_megatron_flags("--micro-batch-size 1 --pipeline-model-parallel-size 4 --global-batch-size 64 "
                                 "--pipeline-model-parallel-layout 'Et*3|t*4|t*4|t*4|t*4|t*4|t*4|t*5L'",
                                 small, cluster(1, 4));
  ASSERT_TRUE(l) << l.error().to_string();
  EXPECT_EQ(l->plan.stages[0].chunk_layers, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(l->plan.stages[3].chunk_layers, (std::vector<int64_t>{4, 5}));
  auto lo = export_plan(Engine::kMegatron, {small, cluster(1, 4), training(64, 4096), l->plan, {}});
  ASSERT_TRUE(lo && lo->exported);
  EXPECT_EQ(value(lo->exported->options, "--pipeline-model-parallel-layout"), "Et*3|t*4|t*4|t*4|t*4|t*4|t*4|t*5L");
  EXPECT_FALSE(value(lo->exported->options, "--account-for-embedding-in-pipeline-split").has_value());

  // torchtitan's generated split has equal chunks on a rank: the export is refused, naming the
  // stages, and the nearest plan evens the chunks.
  auto tt = export_plan(Engine::kTorchtitan, {small, cluster(1, 4), training(64, 4096), l->plan, {}});
  ASSERT_TRUE(tt) << tt.error().to_string();
  EXPECT_FALSE(tt->exported);
  bool named = false;
  for (const auto& e : tt->reasons)
    named = named || (e.path == "plan.stages" && e.message.find("same number of blocks") != std::string::npos);
  EXPECT_TRUE(named);
  ASSERT_TRUE(tt->nearest);
  EXPECT_FALSE(plan::uneven_chunks(tt->nearest->plan));
  // DeepSpeed's pipeline has no interleaving: the nearest plan has one chunk a stage and states none.
  auto ds = export_plan(Engine::kDeepSpeed, {small, cluster(1, 4), training(64, 4096), l->plan, {}});
  ASSERT_TRUE(ds) << ds.error().to_string();
  ASSERT_TRUE(ds->nearest);
  EXPECT_EQ(ds->nearest->plan.virtual_pipeline_stages, 1);
  for (const auto& st : ds->nearest->plan.stages) EXPECT_TRUE(st.chunk_layers.empty());
  EXPECT_TRUE(plan::validate_plan(ds->nearest->plan, small, cluster(1, 4), training(64, 4096)));
  EXPECT_TRUE(plan::validate_plan(tt->nearest->plan, small, cluster(1, 4), training(64, 4096)));
}

// The loss kernel: --cross-entropy-loss-fusion (impl native by default) is read and written as
// training.cross_entropy_fusion "native"; Transformer Engine's ("te"), which Megatron-LM's own
// validate_args refuses at d98e8a64 (Megatron-Bridge's configs still run it), is refused both ways,
// naming the flag or the field. Before 2026-12-07 the flags were ignored.
TEST(Megatron, CrossEntropyFusionFlags) {
  const auto m = model("llama3-8b");
  auto r = import_megatron_flags("--micro-batch-size 1 --cross-entropy-loss-fusion", m, cluster(1, 8));
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->training.cross_entropy_fusion, spec::CrossEntropyFusion::kNative);
  r = import_megatron_flags("--micro-batch-size 1 --cross-entropy-fusion-impl native", m, cluster(1, 8));
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->training.cross_entropy_fusion);  // the impl alone changes nothing
  r = import_megatron_flags("--micro-batch-size 1 --cross-entropy-loss-fusion --cross-entropy-fusion-impl te", m,
                            cluster(1, 8));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().path, "--cross-entropy-fusion-impl");
  auto t = training(256, 4096);
  t.cross_entropy_fusion = spec::CrossEntropyFusion::kNative;
  const auto p = testing::plan(8, 1, {32}, 1, 32, /*zero=*/1);
  const auto got = exported(m, cluster(1, 8), t, p);
  EXPECT_NE(std::find(got.begin(), got.end(), Option{"--cross-entropy-loss-fusion", std::nullopt}), got.end());
  EXPECT_NE(std::find(got.begin(), got.end(), Option{"--cross-entropy-fusion-impl", std::string("native")}), got.end());
  t.cross_entropy_fusion = spec::CrossEntropyFusion::kTe;
  auto refused = export_plan(Engine::kMegatron, {m, cluster(1, 8), t, p, {}});
  ASSERT_TRUE(refused) << refused.error().to_string();
  EXPECT_FALSE(refused->exported);
  ASSERT_FALSE(refused->reasons.empty());
  EXPECT_EQ(refused->reasons[0].path, "training.cross_entropy_fusion");
}

TEST(Megatron, SplitsFromFlags) {
  EXPECT_EQ(*megatron_layers_from_first_last(40, 4, 7, std::nullopt), (std::vector<int64_t>{7, 11, 11, 11}));
  EXPECT_EQ(*megatron_layers_from_first_last(40, 2, std::nullopt, 15), (std::vector<int64_t>{25, 15}));
  EXPECT_FALSE(megatron_layers_from_first_last(40, 4, 6, std::nullopt));  // 34 over 3 stages
  // Repetition forms of the layout string.
  auto ll = megatron_layers_from_layout("Ett|(tt|)*2,t*3L", 4, 9);
  ASSERT_TRUE(ll) << ll.error().to_string();
  EXPECT_EQ(ll->layers, (std::vector<int64_t>{2, 2, 2, 3}));
  EXPECT_EQ(megatron_split({8, 12, 10, 10}, 1).layout, "Et*8|t*12|t*10|t*10L");
  EXPECT_EQ(megatron_split({12, 10, 10, 8}, 1).first, 12);
  EXPECT_EQ(megatron_split({12, 10, 10, 8}, 1).last, 8);
  EXPECT_FALSE(megatron_split({10, 10, 10, 10}, 2).first);
}

}  // namespace
}  // namespace mist::engines
