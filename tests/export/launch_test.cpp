// What a launch needs beyond the plan's own options, one test per export the engines' own
// validation rejected (docs/engines.md, "Checked by the engines' own code"): each stays fixed
// without the engines' checkouts. Plans go through the engine's nearest expressible plan, as
// `mist tune --engine` returns them; each test states what that keeps.
#include <algorithm>

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

Exported exported(Engine e, const spec::ModelSpec& m, const spec::ClusterSpec& c, const spec::TrainingSpec& t,
                  const plan::Plan& p) {
  auto r = export_plan(e, {m, c, t, nearest_expressible(p, e, &t).plan, {}});
  EXPECT_TRUE(r) << (r ? "" : r.error().to_string());
  if (!r || !r->exported) {
    ADD_FAILURE() << "refused: " << (r && !r->reasons.empty() ? r->reasons[0].to_string() : "");
    return {};
  }
  return *r->exported;
}

std::optional<std::string> value(const Exported& x, std::string_view name) {
  for (const auto& o : x.options)
    if (o.name == name) return o.value.value_or("");
  return std::nullopt;
}

bool has_note(const std::vector<std::string>& notes, std::string_view text) {
  return std::ranges::any_of(notes, [&](const std::string& n) { return n.find(text) != std::string::npos; });
}

const EnvVar kSingleConnection{"CUDA_DEVICE_MAX_CONNECTIONS", "1"};

// Megatron-LM arguments.py:1354 and Megatron-DeepSpeed arguments.py:311 assert
// max_position_embeddings >= seq_length; llama2-7b's context is 4096.
TEST(Launch, PositionEmbeddingsCoverTheSequence) {
  const auto m = model("llama2-7b");
  const auto p = testing::plan(8, 1, {32}, 1, 2, /*zero=*/1);
  for (Engine e : {Engine::kMegatron, Engine::kDeepSpeed}) {
    const auto long_seq = exported(e, m, cluster(1, 8), training(16, 8192), p);
    EXPECT_EQ(value(long_seq, "--max-position-embeddings"), "8192") << to_string(e);
    EXPECT_EQ(value(long_seq, "--seq-length"), "8192") << to_string(e);
    EXPECT_TRUE(has_note(long_seq.notes, "--max-position-embeddings 8192")) << to_string(e);
    const auto short_seq = exported(e, m, cluster(1, 8), training(16, 2048), p);
    EXPECT_EQ(value(short_seq, "--max-position-embeddings"), "4096") << to_string(e);
    EXPECT_FALSE(has_note(short_seq.notes, "--max-position-embeddings")) << to_string(e);
  }
}

// A learned position table cannot be raised by a flag: it is the model's size. Such a job is refused.
TEST(Launch, ASequenceBeyondALearnedPositionTableIsRefused) {
  const auto m = model("gpt3-1.3b");  // 2048 learned positions
  auto ok = plan::validate_plan(testing::plan(8, 1, {24}, 1, 2), m, cluster(1, 8), training(16, 2048));
  EXPECT_TRUE(ok);
  auto r = plan::validate_plan(testing::plan(8, 1, {24}, 1, 2), m, cluster(1, 8), training(16, 4096));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().path, "training.seq_length");
  EXPECT_NE(r.error().message.find("2048"), std::string::npos) << r.error().message;
}

// torchtitan trainer.py:168-176: CUDA graphs are on by default and refuse pipeline parallelism.
TEST(Launch, TorchtitanPipelinesTurnCudaGraphsOff) {
  const auto m = model("llama3-8b");
  const auto t = training(32, 8192);
  auto piped = testing::plan(4, 1, {16, 16}, 1, 8, /*zero=*/2);
  const auto x = exported(Engine::kTorchtitan, m, cluster(1, 8, "H100-SXM5-80GB"), t, piped);
  EXPECT_TRUE(value(x, "--training.disable_cuda_graphs"));
  EXPECT_TRUE(has_note(x.notes, "CUDA graph"));
  const auto flat = exported(Engine::kTorchtitan, m, cluster(1, 8, "H100-SXM5-80GB"), t,
                             testing::plan(8, 1, {32}, 1, 4, /*zero=*/3));
  EXPECT_FALSE(value(flat, "--training.disable_cuda_graphs"));  // graphs stay on where they work
}

// DeepSpeed engine.py:1369-1372: ZeRO-Offload with a client optimizer other than DeepSpeedCPUAdam
// raises while zero_force_ds_cpu_optimizer is true (the default); --cpu-optimizer builds that one.
TEST(Launch, DeepSpeedOptimizerOffloadUsesItsCpuAdam) {
  const auto m = model("llama2-7b");
  auto p = testing::plan(8, 1, {32}, 1, 2, /*zero=*/2);
  p.stages[0].offload.optimizer_states = 1;
  const auto x = exported(Engine::kDeepSpeed, m, cluster(1, 8), training(16, 4096), p);
  EXPECT_EQ(x.config["zero_optimization"]["offload_optimizer"]["device"], "cpu");
  EXPECT_TRUE(value(x, "--cpu-optimizer"));
  const auto on_gpu = exported(Engine::kDeepSpeed, m, cluster(1, 8), training(16, 4096),
                               testing::plan(8, 1, {32}, 1, 2, /*zero=*/2));
  EXPECT_FALSE(value(on_gpu, "--cpu-optimizer"));

  // Importing the combination DeepSpeed refuses says so.
  const std::string flags = "--deepspeed --tensor-model-parallel-size 1 --no-pipeline-parallel --seq-length 4096 "
                            "--micro-batch-size 1 --zero-stage 2 --bf16";
  auto imported = import_deepspeed(x.config, flags, m, cluster(1, 8));
  ASSERT_TRUE(imported) << imported.error().to_string();
  EXPECT_TRUE(has_note(imported->notes, "without --cpu-optimizer"));
  auto with_flag = import_deepspeed(x.config, flags + " --cpu-optimizer", m, cluster(1, 8));
  ASSERT_TRUE(with_flag);
  EXPECT_FALSE(has_note(with_flag->notes, "without --cpu-optimizer"));
  EXPECT_EQ(with_flag->plan.stages[0].offload.optimizer_states, 1);
}

// Megatron-LM arguments.py:1453-1479: tp > 1 before Blackwell asserts CUDA_DEVICE_MAX_CONNECTIONS=1,
// except under Megatron-FSDP; Megatron-DeepSpeed arguments.py:400-407 raises with sequence parallelism.
TEST(Launch, TheEnvironmentTheEnginesAssert) {
  const auto m = model("llama2-7b");
  const auto t = training(16, 4096);
  auto tp = testing::plan(4, 2, {32}, 1, 4, /*zero=*/1);
  tp.sequence_parallel = true;
  using Env = std::vector<EnvVar>;
  EXPECT_EQ(exported(Engine::kMegatron, m, cluster(1, 8), t, tp).environment, Env{kSingleConnection});
  EXPECT_EQ(exported(Engine::kMegatron, m, cluster(1, 8, "H100-SXM5-80GB"), t, tp).environment,
            Env{kSingleConnection});
  EXPECT_TRUE(has_note(exported(Engine::kMegatron, m, cluster(1, 8), t, tp).notes, "sm_80"));
  EXPECT_EQ(exported(Engine::kMegatron, m, cluster(1, 8, "B200-SXM-180GB"), t, tp).environment, Env{});
  EXPECT_EQ(exported(Engine::kMegatron, m, cluster(1, 8), t, testing::plan(8, 1, {32}, 1, 2, 1)).environment, Env{});
  // Context parallelism alone asserts it too (engine_check, 2026-12-04: dp 4 cp 2 on 8 H100 was
  // rejected at arguments.py:1477).
  auto cp = testing::plan(4, 1, {32}, 1, 4, /*zero=*/1);
  cp.cp = 2;
  EXPECT_EQ(exported(Engine::kMegatron, m, cluster(1, 8, "H100-SXM5-80GB"), t, cp).environment,
            Env{kSingleConnection});
  EXPECT_TRUE(has_note(exported(Engine::kMegatron, m, cluster(1, 8, "H100-SXM5-80GB"), t, cp).notes,
                       "context parallelism"));
  auto fsdp = tp;
  for (auto& s : fsdp.stages) s.zero = 3;
  EXPECT_EQ(exported(Engine::kMegatron, m, cluster(1, 8), t, fsdp).environment, Env{});

  EXPECT_EQ(exported(Engine::kDeepSpeed, m, cluster(1, 8), t, tp).environment, Env{kSingleConnection});
  auto no_sp = tp;
  no_sp.sequence_parallel = false;
  EXPECT_EQ(exported(Engine::kDeepSpeed, m, cluster(1, 8), t, no_sp).environment, Env{});
  EXPECT_EQ(exported(Engine::kTorchtitan, m, cluster(1, 8), t, tp).environment, Env{});

  // The block pastes as it is, and reads back as the same plan.
  const auto x = exported(Engine::kMegatron, m, cluster(1, 8), t, tp);
  const std::string block = render_environment(x.environment) + render_options(x.options);
  EXPECT_TRUE(block.starts_with("export CUDA_DEVICE_MAX_CONNECTIONS=1\n--tensor-model-parallel-size 2 \\\n"))
      << block;
  auto back = import_megatron_flags(block, m, cluster(1, 8));
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(back->plan.tp, 2);
  EXPECT_TRUE(back->plan.sequence_parallel);
}

// torchtitan chooses the model with --module and --config; it has llama3 8B, 70B and 405B, no Llama 2
// and no GPT-style model.
TEST(Launch, TorchtitanNamesItsModelOrSaysWhatToAdd) {
  const auto c = cluster(1, 8, "H100-SXM5-80GB");
  const auto t = training(16, 4096);
  const auto p = testing::plan(8, 1, {32}, 1, 2, /*zero=*/3);
  const auto llama3 = exported(Engine::kTorchtitan, model("llama3-8b"), c, t, p);
  EXPECT_EQ(llama3.options.at(0), (Option{"--module", "llama3"}));
  EXPECT_EQ(llama3.options.at(1), (Option{"--config", "llama3_8b"}));

  const auto llama2 = exported(Engine::kTorchtitan, model("llama2-7b"), c, t, p);
  EXPECT_EQ(value(llama2, "--config"), "mist_llama2_7b");
  EXPECT_TRUE(has_note(llama2.notes, "dim=4096, n_layers=32, n_heads=32, n_kv_heads=32, vocab_size=32000"));
  EXPECT_TRUE(has_note(llama2.notes, "hidden_dim=11008"));
  // ComplexRoPE.Config requires max_context_length (engine_check, 2026-12-04: the flavor built from
  // the note without it failed at llama3/__init__.py:375; with it torchtitan accepts the export).
  EXPECT_TRUE(has_note(llama2.notes, "rope=ComplexRoPE.Config(dim=128, max_context_length=4096)"));

  const auto gpt = exported(Engine::kTorchtitan, model("gpt3-6.7b"), c, training(16, 2048), p);
  EXPECT_FALSE(value(gpt, "--module"));
  EXPECT_TRUE(has_note(gpt.notes, "torchtitan has no model for gpt3-6.7b"));
  EXPECT_TRUE(has_note(gpt.notes, "LayerNorm, a GELU MLP, learned positions, biases"));

  // Reading a config back checks that it builds the job's model.
  const std::string text = render_options(llama3.options);
  auto same = import_torchtitan_overrides(text, model("llama3-8b"), c);
  ASSERT_TRUE(same) << same.error().to_string();
  auto other = import_torchtitan_overrides(text, model("llama3-70b"), c);
  ASSERT_FALSE(other);
  EXPECT_EQ(other.error().path, "--config");
}

// torch.compile: training.compile is torchtitan's --compile.enable both ways, and async TP (which
// runs in the compiled model) needs it.
TEST(Launch, TorchtitanCompileAndAsyncTensorParallel) {
  const auto m = model("llama3-8b");
  const auto c = cluster(1, 8, "H100-SXM5-80GB");
  auto t = training(16, 4096);
  auto p = testing::plan(4, 2, {32}, 1, 4, /*zero=*/3);
  p.sequence_parallel = p.overlap_tp_comm = true;
  const auto eager = exported(Engine::kTorchtitan, m, c, t, p);  // the nearest plan drops async TP
  EXPECT_FALSE(value(eager, "--compile.enable"));
  EXPECT_FALSE(value(eager, "--compile.enable_async_tensor_parallel"));
  EXPECT_FALSE(nearest_expressible(p, Engine::kTorchtitan, &t).plan.overlap_tp_comm);
  t.compile = true;
  const auto compiled = exported(Engine::kTorchtitan, m, c, t, p);
  EXPECT_TRUE(value(compiled, "--compile.enable"));
  EXPECT_TRUE(value(compiled, "--compile.enable_async_tensor_parallel"));
  auto back = import_torchtitan_overrides(render_options(compiled.options), m, c);
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(back->training.compile, true);
  EXPECT_TRUE(back->plan.overlap_tp_comm);
  auto no_compile = import_torchtitan_overrides(
      "--parallelism.tensor_parallel_degree 2 --compile.enable_async_tensor_parallel", m, c);
  ASSERT_FALSE(no_compile);
  EXPECT_EQ(no_compile.error().path, "--compile.enable_async_tensor_parallel");
}

// torchtitan compiles the loss with the model unless --compile.components leaves it out
// (training.compile_loss): the export names the model alone for an eager loss, the import reads
// the list back, and a list without the model, or with a component torchtitan lacks, is refused.
TEST(Launch, TorchtitanCompiledLossRoundTrips) {
  const auto m = model("llama3-8b");
  const auto c = cluster(1, 8, "H100-SXM5-80GB");
  auto t = training(16, 4096);
  t.compile = true;
  const auto p = testing::plan(8, 1, {32}, 1, 2, /*zero=*/3);
  const auto both = exported(Engine::kTorchtitan, m, c, t, p);
  EXPECT_FALSE(value(both, "--compile.components"));  // the default: model and loss
  auto back = import_torchtitan_overrides(render_options(both.options), m, c);
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(back->training.compile_loss, true);
  EXPECT_TRUE(back->training.applied_to(t).compiled_loss());

  t.compile_loss = false;
  const auto model_only = exported(Engine::kTorchtitan, m, c, t, p);
  ASSERT_TRUE(value(model_only, "--compile.components"));
  EXPECT_EQ(*value(model_only, "--compile.components"), "model");
  back = import_torchtitan_overrides(render_options(model_only.options), m, c);
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(back->training.compile_loss, false);
  EXPECT_FALSE(back->training.applied_to(training(16, 4096)).compiled_loss());

  for (const char* bad : {"--compile.enable --compile.components loss", "--compile.enable --compile.components model optimizer",
                          "--compile.enable --compile.components model activation-checkpoint:full"}) {
    auto r = import_torchtitan_overrides(bad, m, c);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().path, "--compile.components");
  }
}

}  // namespace
}  // namespace mist::engines
