// DeepSpeed (+ Megatron-DeepSpeed): exact configs and flags, its pipeline partition, refusals,
// import errors that name the key or flag.
#include <gtest/gtest.h>

#include "export/deepspeed.hpp"
#include "export/splits.hpp"
#include "export_jobs.hpp"

namespace mist::engines {
namespace {

using testing::cluster;
using testing::model;
using testing::training;

TEST(DeepSpeed, PipelinedGpt13bWithZero1AndFullRecompute) {
  auto p = testing::plan(4, 2, {20, 20}, 2, 64, /*zero=*/1, /*ckpt=*/20);
  p.overlap_grad_reduce = p.overlap_param_gather = false;  // DeepSpeed below ZeRO-2 overlaps neither
  p.grad_accumulation_fusion = false;                      // nor fuses gradient accumulation
  p.async_tp_backward = false;                             // nor overlaps the TP all-reduce (--deepspeed)
  const auto t = training(512, 2048);
  auto r = export_plan(Engine::kDeepSpeed, {model("gpt3-13b"), cluster(2, 8), t, p, {}});
  ASSERT_TRUE(r && r->exported) << (r && !r->reasons.empty() ? r->reasons[0].to_string() : "");
  EXPECT_EQ(r->exported->config, Json::parse(R"({
      "train_batch_size": 512, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 64,
      "bf16": {"enabled": true}, "zero_optimization": {"stage": 1}})"));
  std::vector<std::string> got;
  for (const auto& o : r->exported->options) got.push_back(o.name + (o.value ? " " + *o.value : ""));
  EXPECT_EQ(got, (std::vector<std::string>{
                     "--deepspeed", "--deepspeed_config ds_config.json", "--tensor-model-parallel-size 2",
                     "--pipeline-model-parallel-size 2", "--micro-batch-size 2", "--global-batch-size 512",
                     "--seq-length 2048", "--zero-stage 1", "--checkpoint-activations", "--checkpoint-num-layers 1",
                     "--deepspeed-activation-checkpointing", "--bf16", "--optimizer adam", "--hidden-dropout 0",
                     "--attention-dropout 0", "--num-layers 40", "--hidden-size 5120", "--ffn-hidden-size 20480",
                     "--num-attention-heads 40", "--max-position-embeddings 2048"}));
  // No option chooses the partition (GPTModelPipe sets 'type:transformer'); the notes say which split it makes.
  bool named = false;
  for (const auto& n : r->exported->notes)
    named |= n.find("20, 20") != std::string::npos && n.find("'type:transformer'") != std::string::npos;
  EXPECT_TRUE(named);
}

TEST(DeepSpeed, DataParallelZero3WithParameterAndPartialOptimizerOffload) {
  auto p = testing::plan(8, 1, {32}, 4, 8, /*zero=*/3, /*ckpt=*/10);
  p.stages[0].offload.weights = 1;
  p.stages[0].offload.optimizer_states = 0.5;
  p.grad_accumulation_fusion = false;
  const auto t = training(256, 4096, spec::Dtype::kFp16);
  auto r = export_plan(Engine::kDeepSpeed, {model("llama2-7b"), cluster(1, 8), t, p, {}},
                       {.deepspeed_config_path = "z3.json"});
  ASSERT_TRUE(r && r->exported) << (r && !r->reasons.empty() ? r->reasons[0].to_string() : "");
  EXPECT_EQ(r->exported->config, Json::parse(R"({
      "train_batch_size": 256, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 8,
      "fp16": {"enabled": true},
      "zero_optimization": {"stage": 3, "overlap_comm": true,
        "offload_optimizer": {"device": "cpu", "pin_memory": true, "ratio": 0.5},
        "offload_param": {"device": "cpu", "pin_memory": true}}})"));
  std::vector<std::string> got;
  for (const auto& o : r->exported->options) got.push_back(o.name + (o.value ? " " + *o.value : ""));
  const std::vector<std::string> head{"--deepspeed", "--deepspeed_config z3.json", "--tensor-model-parallel-size 1",
                                      "--pipeline-model-parallel-size 1", "--no-pipeline-parallel",
                                      "--micro-batch-size 4", "--global-batch-size 256", "--seq-length 4096",
                                      "--zero-stage 3", "--recompute-granularity full", "--recompute-method block",
                                      "--recompute-num-layers 10", "--cpu-optimizer", "--fp16"};
  ASSERT_GE(got.size(), head.size());
  EXPECT_EQ(std::vector<std::string>(got.begin(), got.begin() + static_cast<long>(head.size())), head);
  for (const char* f : {"--num-layers 32", "--normalization rmsnorm", "--swiglu", "--use-rotary-position-embeddings",
                        "--untie-embeddings-and-output-weights", "--disable-bias-linear"})
    EXPECT_NE(std::find(got.begin(), got.end(), f), got.end()) << f;
}

TEST(DeepSpeed, PipelinePartitionFollowsTypeTransformer) {
  // Checked against a re-statement of runtime/utils.py partition_balanced over GPTModelPipe's specs.
  EXPECT_EQ(deepspeed_pipe_layers(60, 8, true), (std::vector<int64_t>{8, 8, 8, 8, 7, 7, 7, 7}));
  EXPECT_EQ(deepspeed_pipe_layers(30, 4, true), (std::vector<int64_t>{8, 8, 7, 7}));
  EXPECT_EQ(deepspeed_pipe_layers(40, 3, true), (std::vector<int64_t>{14, 13, 13}));
  EXPECT_EQ(deepspeed_pipe_layers(13, 4, false), (std::vector<int64_t>{4, 3, 3, 3}));
  EXPECT_EQ(deepspeed_pipe_layers(40, 4, true), (std::vector<int64_t>{10, 10, 10, 10}));
}

TEST(DeepSpeed, RefusesWhatItCannotRun) {
  const auto t = training(512, 2048);
  auto p = testing::plan(2, 4, {22, 18}, 2, 128, /*zero=*/2, /*ckpt=*/6);
  p.virtual_pipeline_stages = 2;
  p.stages[0].offload.activations = 0.5;
  std::vector<Error> why;
  EXPECT_FALSE(expressible(p, Engine::kDeepSpeed, &why, &t));
  std::vector<std::string> paths;
  for (const auto& e : why) paths.push_back(e.path);
  EXPECT_EQ(paths, (std::vector<std::string>{"plan.stages[0].zero", "plan.virtual_pipeline_stages", "plan.stages",
                                             "plan.stages[0].ckpt_layers", "plan.overlap_grad_reduce",
                                             "plan.overlap_param_gather", "plan.grad_accumulation_fusion",
                                             "plan.async_tp_backward",
                                             "plan.stages[0].offload.activations"}));
  const auto n = nearest_expressible(p, Engine::kDeepSpeed, &t).plan;
  EXPECT_EQ(n.stages[0].zero, 1);
  EXPECT_EQ(n.virtual_pipeline_stages, 1);
  EXPECT_EQ(n.stages[0].num_layers, 20);
  EXPECT_EQ(n.stages[1].ckpt_layers, 20);  // every block or none
  // A fraction of the optimizer states below 1 needs ZeRO-3: the nearest offloads all of it.
  auto q = testing::plan(16, 1, {40}, 1, 32, 1);
  q.stages[0].offload.optimizer_states = 0.4;
  q.overlap_grad_reduce = q.overlap_param_gather = false;
  EXPECT_EQ(nearest_expressible(q, Engine::kDeepSpeed, &t).plan.stages[0].offload.optimizer_states, 1);
}

TEST(DeepSpeed, ImportsConfigAndFlags) {
  const auto m = model("gpt3-13b");
  const auto c = cluster(2, 8);
  const Json cfg = Json::parse(R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 64,
      "bf16": {"enabled": true}, "zero_optimization": {"stage": 1, "reduce_bucket_size": 5e8},
      "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}, "steps_per_print": 10})");
  auto r = import_deepspeed(cfg, "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --seq-length 2048 "
                                 "--bf16 --deepspeed --deepspeed_config ds.json --checkpoint-activations",
                            m, c);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->plan.dp, 4);
  EXPECT_EQ(r->plan.grad_accum_steps, 64);
  EXPECT_EQ(r->plan.stages[1].ckpt_layers, 20);
  EXPECT_EQ(r->plan.stages[0].zero, 1);
  EXPECT_EQ(r->training.global_batch_size, 512);
  EXPECT_EQ(r->training.optimizer, spec::Optimizer::kAdamW);
  // JSON alone: data parallel over all 16 GPUs, the batch from train_batch_size.
  auto dp = import_deepspeed(Json::parse(R"({"train_batch_size": 64, "zero_optimization": {"stage": 2}})"), "", m, c);
  ASSERT_TRUE(dp) << dp.error().to_string();
  EXPECT_EQ(dp->plan.dp, 16);
  EXPECT_EQ(dp->plan.micro_batch_size, 4);
  EXPECT_EQ(dp->plan.stages[0].zero, 2);
  EXPECT_FALSE(dp->plan.overlap_grad_reduce);  // overlap_comm defaults to false below stage 3
}

TEST(DeepSpeed, ImportErrorsNameTheKeyOrFlag) {
  const auto m = model("gpt3-13b");
  const auto c = cluster(2, 8);
  auto error_path = [&](const char* json, const std::string& flags = "") {
    auto r = import_deepspeed(Json::parse(json), flags, m, c);
    return r ? std::string("ok") : r.error().path;
  };
  EXPECT_EQ(error_path(R"({})"), "deepspeed.train_batch_size");
  EXPECT_EQ(error_path(R"({"train_batch_size": 100})"), "deepspeed.train_batch_size");
  EXPECT_EQ(error_path(R"({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2,
                          "gradient_accumulation_steps": 4})"), "deepspeed.train_batch_size");
  EXPECT_EQ(error_path(R"({"train_batch_size": 64, "zero_optimization": {"stage": 4}})"),
            "deepspeed.zero_optimization.stage");
  EXPECT_EQ(error_path(R"({"train_batch_size": 64, "zero_optimization": {"stage": 2,
                          "offload_optimizer": {"device": "cpu", "ratio": 0.5}}})"),
            "deepspeed.zero_optimization.offload_optimizer.ratio");
  EXPECT_EQ(error_path(R"({"train_batch_size": 64, "zero_optimization": {"stage": 2,
                          "offload_param": {"device": "cpu"}}})"),
            "deepspeed.zero_optimization.offload_param");
  EXPECT_EQ(error_path(R"({"train_batch_size": 64, "zero_optimization": {"offload_optimizer": {"device": "disk"}}})"),
            "deepspeed.zero_optimization.offload_optimizer.device");
  EXPECT_EQ(error_path(R"({"train_batch_size": 64, "bf16": {"enabled": "yes"}})"), "deepspeed.bf16.enabled");
  EXPECT_EQ(error_path(R"({"train_batch_size": 64, "zero_optimization": {"stage": 2}})",
                       "--pipeline-model-parallel-size 2"),
            "deepspeed.zero_optimization.stage");
  EXPECT_EQ(error_path(R"({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 1})",
                       "--micro-batch-size 2 --no-pipeline-parallel"),
            "--micro-batch-size");
  EXPECT_EQ(error_path(R"({"train_batch_size": 64, "zero_optimization": {"stage": 1}})",
                       "--zero-stage 3 --no-pipeline-parallel"),
            "--zero-stage");
  EXPECT_EQ(error_path(R"({"train_batch_size": 64})", "--no-pipeline-parallel --recompute-granularity full"),
            "--recompute-method");
  EXPECT_EQ(error_path(R"({"train_batch_size": 64})", "--num-attention-heads 32"), "--num-attention-heads");
}

}  // namespace
}  // namespace mist::engines
