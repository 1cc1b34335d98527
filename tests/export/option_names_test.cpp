// The option names mist writes and reads, as checked against each engine's source at the named
// commit (docs/engines.md says where each one is defined). A new option must be checked against
// the source and added here; the tests fail on any name not in these lists.
#include <algorithm>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "export/deepspeed.hpp"
#include "export/megatron.hpp"
#include "export/torchtitan.hpp"
#include "export_jobs.hpp"

namespace mist::engines {
namespace {

// NVIDIA/Megatron-LM @ d98e8a64ddf34856e74b24714e3bedb2f5a39553 (2026-08-22): megatron/training/arguments.py
// and the dataclass fields argument_utils.py turns into flags (TransformerConfig, ModelParallelConfig,
// TrainingConfig, CheckpointConfig, DistributedInitConfig).
constexpr std::string_view kMegatronCommit = "d98e8a64ddf34856e74b24714e3bedb2f5a39553";
const std::set<std::string> kMegatronNames{
    "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size",
    "--cp-comm-type",  // arguments.py:3221, nargs '+', default ["p2p"]
    "--hierarchical-context-parallel-sizes",  // ModelParallelConfig, nargs '+': a2a+p2p's group sizes
    "--expert-model-parallel-size", "--sequence-parallel", "--num-layers-per-virtual-pipeline-stage",
    "--num-virtual-stages-per-pipeline-rank", "--decoder-first-pipeline-num-layers",
    "--decoder-last-pipeline-num-layers", "--pipeline-model-parallel-layout", "--micro-batch-size",
    "--global-batch-size", "--seq-length", "--recompute-granularity", "--recompute-method", "--recompute-num-layers",
    "--recompute-activations", "--recompute-modules", "--use-distributed-optimizer", "--overlap-grad-reduce",
    "--overlap-param-gather", "--tp-comm-overlap", "--no-gradient-accumulation-fusion", "--use-megatron-fsdp",
    "--use-torch-fsdp2", "--data-parallel-sharding-strategy", "--ckpt-format", "--optimizer-cpu-offload",
    "--use-precision-aware-optimizer", "--optimizer-offload-fraction", "--cpu-offloading-num-layers", "--bf16",
    "--fp16", "--fp8-format", "--fp8-recipe", "--fp8-param-gather", "--optimizer", "--hidden-dropout", "--attention-dropout",
    // The gradients' dtype: arguments.py:3069 (--accumulate-allreduce-grads-in-fp32) and :3053
    // (--grad-reduce-in-bf16), which validate_args (:1195-1216) turns into fp16 or fp32 main gradients.
    "--accumulate-allreduce-grads-in-fp32", "--grad-reduce-in-bf16",
    "--num-layers", "--hidden-size", "--ffn-hidden-size", "--num-attention-heads", "--group-query-attention", "--num-query-groups",
    "--max-position-embeddings", "--normalization", "--swiglu", "--position-embedding-type",
    "--untie-embeddings-and-output-weights", "--disable-bias-linear", "--add-qkv-bias",
    // MoE: --num-experts by hand (arguments.py _add_moe_args); the others from TransformerConfig
    // and ModelParallelConfig fields (moe_router_topk, moe_ffn_hidden_size, moe_grouped_gemm,
    // moe_token_dispatcher_type, moe_shared_expert_intermediate_size, moe_shared_expert_gate,
    // expert_tensor_parallel_size).
    "--num-experts", "--moe-router-topk", "--moe-ffn-hidden-size", "--moe-grouped-gemm",
    "--moe-token-dispatcher-type", "--expert-tensor-parallel-size", "--moe-shared-expert-intermediate-size",
    "--moe-shared-expert-gate", "--moe-expert-capacity-factor", "--moe-pad-expert-input-to-capacity",
    "--moe-router-dtype",  // TransformerConfig.moe_router_dtype (transformer_config.py:811)
    // Qwen3's attention: TransformerConfig's kv_channels and qk_layernorm (transformer_config.py:184, :259).
    "--kv-channels", "--qk-layernorm",
    // gpt-oss: arguments.py:2384-2393 (window), TransformerConfig softmax_type :170, glu_linear_offset
    // :231, activation_func_clamp_value :235, --quick-geglu arguments.py:2452.
    "--window-size", "--window-attn-skip-freq", "--softmax-type", "--quick-geglu", "--glu-linear-offset",
    "--activation-func-clamp-value",
    "--moe-layer-freq",  // arguments.py:327 moe_freq_type
    // MLA: TransformerConfig.multi_latent_attention; arguments.py:3548-3557.
    "--multi-latent-attention", "--q-lora-rank", "--kv-lora-rank", "--qk-head-dim", "--qk-pos-emb-head-dim",
    "--v-head-dim",
    // Multi-token prediction: TransformerConfig.mtp_num_layers (transformer_config.py:68), a flag
    // through argument_utils.py; validate_args (arguments.py:881) allows it with rope or no positions.
    "--mtp-num-layers",
    // The MoE all-to-all overlap: ModelParallelConfig.overlap_moe_expert_parallel_comm (:343) and
    // delay_wgrad_compute (:348), flags through ArgumentGroupFactory (arguments.py:2373).
    "--overlap-moe-expert-parallel-comm", "--delay-wgrad-compute",
    // TransformerConfig.account_for_embedding_in_pipeline_split (:137) and account_for_loss_in_pipeline_split
    // (:141), flags through argument_utils.py: read on import (2026-12-07), never written.
    "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split",
    // TransformerConfig.cross_entropy_loss_fusion and cross_entropy_fusion_impl ("native" or "te";
    // language_module.py compute_language_model_loss).
    "--cross-entropy-loss-fusion", "--cross-entropy-fusion-impl",
    // Read only, to say what it changes: TransformerConfig.moe_permute_fusion.
    "--moe-permute-fusion"};

// microsoft/Megatron-DeepSpeed @ f4157bea69f3df8c6cb66f2ebcda66ba03d1288e (2024-12-24): megatron/arguments.py;
// --deepspeed and --deepspeed_config: microsoft/DeepSpeed @ 38327e07 deepspeed/__init__.py.
constexpr std::string_view kMegatronDeepSpeedCommit = "f4157bea69f3df8c6cb66f2ebcda66ba03d1288e";
const std::set<std::string> kMegatronDeepSpeedNames{
    "--deepspeed", "--deepspeed_config", "--tensor-model-parallel-size", "--pipeline-model-parallel-size",
    "--no-pipeline-parallel", "--num-layers-per-virtual-pipeline-stage", "--sequence-parallel",
    "--ds-sequence-parallel-size",  // arguments.py:974, DeepSpeed-Ulysses' degree
    "--use-flash-attn-v2", "--use-flash-attn", "--use-flash-attn-v1", "--use-flash-attn-triton",
    "--use-flash-attn-builder",  // arguments.py:927-935 (--use-flash-attn and -v1 are one switch)
    "--micro-batch-size", "--global-batch-size", "--seq-length", "--zero-stage",
    "--recompute-granularity", "--recompute-method", "--recompute-num-layers", "--recompute-activations",
    "--checkpoint-activations", "--checkpoint-num-layers", "--deepspeed-activation-checkpointing", "--cpu-optimizer",
    "--bf16", "--fp16",
    "--optimizer", "--hidden-dropout", "--attention-dropout", "--num-layers", "--hidden-size", "--ffn-hidden-size",
    "--num-attention-heads", "--num-key-value-heads", "--max-position-embeddings", "--normalization", "--swiglu",
    "--use-rotary-position-embeddings", "--untie-embeddings-and-output-weights", "--disable-bias-linear"};

// microsoft/DeepSpeed @ 38327e07f6cd39b63418f60cedd1651b0be3e7c3 (2025-02-21): runtime/constants.py,
// runtime/zero/config.py, runtime/zero/offload_config.py, runtime/activation_checkpointing/config.py.
constexpr std::string_view kDeepSpeedCommit = "38327e07f6cd39b63418f60cedd1651b0be3e7c3";
const std::set<std::string> kDeepSpeedKeys{
    "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "bf16.enabled",
    "bfloat16.enabled", "fp16.enabled", "optimizer.type", "zero_optimization.stage", "zero_optimization.overlap_comm",
    "zero_optimization.offload_optimizer.device", "zero_optimization.offload_optimizer.pin_memory",
    "zero_optimization.offload_optimizer.ratio", "zero_optimization.offload_param.device",
    "zero_optimization.offload_param.pin_memory", "zero_optimization.cpu_offload",
    "activation_checkpointing.cpu_checkpointing"};

// pytorch/torchtitan @ b5bcd76c66d0acb1a08b176d9639425bc55e0b2a (2026-08-21): torchtitan/config/configs.py,
// every name in the frozen list of tests/unit_tests/test_no_new_cli_options.py; the subcommands from
// torchtitan/distributed/activation_checkpoint.py (ActivationCheckpointingConfig); --module and --config
// from torchtitan/config/manager.py (ConfigManager, read before the overrides).
constexpr std::string_view kTorchtitanCommit = "b5bcd76c66d0acb1a08b176d9639425bc55e0b2a";
const std::set<std::string> kTorchtitanNames{
    "--module", "--config", "--training.disable_cuda_graphs",
    "--parallelism.data_parallel_replicate_degree", "--parallelism.data_parallel_shard_degree",
    "--parallelism.fsdp_reshard_after_forward", "--parallelism.tensor_parallel_degree",
    "--parallelism.enable_sequence_parallel", "--parallelism.no_enable_sequence_parallel",
    "--parallelism.pipeline_parallel_degree", "--parallelism.pipeline_parallel_schedule",
    "--parallelism.pipeline_parallel_layers_per_stage", "--parallelism.pipeline_parallel_first_stage_less_layers",
    "--parallelism.pipeline_parallel_last_stage_less_layers", "--parallelism.num_pp_microbatches",
    "--parallelism.context_parallel_degree", "--parallelism.context_parallel_load_balancer",
    "--parallelism.expert_parallel_degree",
    "--parallelism.module_fqns_per_model_part", "--training.num_tokens_per_microbatch_per_dp_rank",
    "--training.num_tokens_per_train_step", "--training.max_context_length", "--training.mixed_precision_param",
    "--training.dtype", "--training.enable_cpu_offload", "--training.no_enable_cpu_offload", "--compile.enable",
    "--compile.enable_async_tensor_parallel", "--compile.components", "activation-checkpoint:none",
    "activation-checkpoint:full",
    "activation-checkpoint:selective", "activation-checkpoint:memory-budget"};

std::set<std::string> names(std::span<const FlagSpec> specs) {
  std::set<std::string> out;
  for (const auto& s : specs) out.insert(std::string(s.name));
  return out;
}

TEST(OptionNames, TheCommitsAreTheOnesChecked) {
  EXPECT_EQ(kMegatronSource.commit, kMegatronCommit);
  EXPECT_EQ(kMegatronDeepSpeedSource.commit, kMegatronDeepSpeedCommit);
  EXPECT_EQ(kDeepSpeedSource.commit, kDeepSpeedCommit);
  EXPECT_EQ(kTorchtitanSource.commit, kTorchtitanCommit);
}

TEST(OptionNames, ExportersAndImportersUseOnlyCheckedNames) {
  EXPECT_EQ(names(megatron_flag_specs()), kMegatronNames);
  EXPECT_EQ(names(megatron_deepspeed_flag_specs()), kMegatronDeepSpeedNames);
  std::set<std::string> keys(deepspeed_config_keys().begin(), deepspeed_config_keys().end());
  EXPECT_EQ(keys, kDeepSpeedKeys);
  auto tt = names(torchtitan_flag_specs());
  tt.insert(torchtitan_subcommands().begin(), torchtitan_subcommands().end());
  EXPECT_EQ(tt, kTorchtitanNames);
}

// Dotted paths of every leaf of a JSON object.
void leaf_keys(const Json& j, const std::string& prefix, std::set<std::string>& out) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string key = prefix.empty() ? it.key() : prefix + "." + it.key();
    if (it->is_object()) leaf_keys(*it, key, out);
    else out.insert(key);
  }
}

TEST(OptionNames, EveryExportedNameOverManyPlansIsAChecked) {
  std::mt19937 rng(11);
  const std::vector<std::tuple<spec::ModelSpec, spec::ClusterSpec, spec::TrainingSpec>> jobs{
      {testing::model("llama3-70b"), testing::cluster(4, 8), testing::training(1024, 4096)},
      {testing::model("gpt3-6.7b"), testing::cluster(1, 8), testing::training(128, 2048, spec::Dtype::kFp16)}};
  std::set<std::string> seen;
  for (const auto& [m, c, t] : jobs)
    for (int i = 0; i < 150; ++i) {
      const auto p = testing::random_plan(rng, m, c, t);
      for (Engine e : all_engines()) {
        if (e == Engine::kTorchtitan && t.precision == spec::Dtype::kFp16) continue;
        auto r = export_plan(e, {m, c, t, nearest_expressible(p, e, &t).plan, {}});
        ASSERT_TRUE(r && r->exported);
        const auto& checked = e == Engine::kMegatron    ? kMegatronNames
                              : e == Engine::kDeepSpeed ? kMegatronDeepSpeedNames
                                                        : kTorchtitanNames;
        for (const auto& o : r->exported->options) {
          EXPECT_TRUE(checked.contains(o.name)) << to_string(e) << ": " << o.name;
          seen.insert(o.name);
        }
        std::set<std::string> keys;
        leaf_keys(r->exported->config, "", keys);
        for (const auto& k : keys) EXPECT_TRUE(kDeepSpeedKeys.contains(k)) << k;
      }
    }
  // The plans reach the options that carry plan knobs.
  for (const char* n : {"--recompute-num-layers", "--use-megatron-fsdp", "--optimizer-offload-fraction",
                        "--num-virtual-stages-per-pipeline-rank", "--checkpoint-activations", "--zero-stage",
                        "--parallelism.fsdp_reshard_after_forward", "activation-checkpoint:full", "--cpu-optimizer",
                        "--training.disable_cuda_graphs", "--module"})
    EXPECT_TRUE(seen.contains(n)) << n;
}

}  // namespace
}  // namespace mist::engines
