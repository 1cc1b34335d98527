// The layers of mist's lowering (graph/lower.cpp) as the executor runs them: same ops, same
// names, same saved tensors. Checkpointing wraps a block's attention core (selective) or the
// whole block (full) in ops::checkpoint.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "executor/executor.hpp"
#include "executor/functions.hpp"

namespace mist::executor {

// What every executed layer shares: op names, parameters with their fp32 gradient accumulators,
// the AdamW state and step.
class LayerBase {
 public:
  LayerBase(const BlockRun& r, at::ScalarType dtype) : run_(r), dtype_(dtype) {}
  virtual ~LayerBase() = default;
  virtual void init_params() = 0;                        // weights in the training dtype
  virtual at::Tensor forward(const at::Tensor& x) = 0;  // with the run's checkpointing
  // Each parameter with its fp32 gradient accumulator.
  virtual std::vector<std::pair<at::Tensor*, at::Tensor*>> params_and_grads() = 0;

  void init_main_grads();  // fp32 gradient accumulators, zeroed
  void init_optimizer();   // AdamW state: fp32 master (mixed precision only), m, v
  void adamw_step(double lr);
  bool weights_finite();
  int64_t param_count();
  const std::vector<std::string>& op_names() const { return names_; }
  // The next forward counts as micro-batch n (dropout masks depend on it).
  void set_micro_batch(int64_t n) { micro_batch_ = n - 1; }

 protected:
  int id(const std::string& name);
  ops::LinearParams linear_params(int64_t in, int64_t out, bool bias);
  ops::NormParams norm_params();
  at::Tensor maybe_dropout(at::Tensor x, const char* name);

  BlockRun run_;
  at::ScalarType dtype_;
  int64_t micro_batch_ = 0;

 private:
  std::vector<std::string> names_;
  std::vector<at::Tensor> master_, exp_avg_, exp_avg_sq_;
  int64_t step_ = 0;
};

// The transformer block (graph/lower.cpp lower_block), with the dense MLP or a mixture of experts
// (graph/lower_moe.cpp moe_mlp).
class Block final : public LayerBase {
 public:
  Block(const BlockRun& r, at::ScalarType dtype);  // makes the constant rotary tables only
  void init_params() override;
  at::Tensor forward(const at::Tensor& x) override;
  std::vector<std::pair<at::Tensor*, at::Tensor*>> params_and_grads() override;

 private:
  // Activations by value, moved in at their last use, so each is freed when no op needs it.
  // `selective`: the run's recompute modules are recomputed (modules_ holds them meanwhile).
  at::Tensor body(const at::Tensor& x, bool selective);
  at::Tensor attention(at::Tensor x, bool checkpoint_core);
  at::Tensor core(at::Tensor q, at::Tensor k, at::Tensor v);
  at::Tensor mlp(at::Tensor x);  // the dense MLP, or the mixture of experts
  // GELU (fc1, gelu, fc2) or SwiGLU (gate_up, swiglu, down) MLP, its ops named `prefix`.op.
  at::Tensor dense_mlp(at::Tensor x, const ops::LinearParams& fc1, const ops::LinearParams& fc2,
                       const std::string& prefix);
  // graph/lower_moe.cpp moe_mlp on one rank of the run's ep × etp expert grid (moe.cpp).
  at::Tensor moe(at::Tensor x);
  // Its routed experts behind the all-to-all dispatcher, or the all-gather one, whose gathered
  // tokens live in gather_buffer_ (Megatron's global memory buffer, outside the activations).
  // `held`: what MoELayer.forward's locals keep referenced until it returns (moe releases them
  // after the shared expert's add).
  at::Tensor moe_alltoall(at::Tensor x, at::Tensor probs, at::Tensor map, std::vector<at::Tensor>& held);
  at::Tensor moe_allgather(at::Tensor x, at::Tensor probs, at::Tensor map, std::vector<at::Tensor>& held);
  // The rank's experts on their rows: grouped fc1, the weighted SwiGLU, grouped fc2.
  at::Tensor experts(at::Tensor rows, at::Tensor row_probs);
  // The experts' probability-weighted activation of fc1's output: SwiGLU, or GELU then the product.
  at::Tensor expert_activation(at::Tensor fc1, at::Tensor row_probs);
  void init_moe_params();

  ops::AttnDims dims_;
  at::Tensor cos_, sin_;
  ops::NormParams ln1_, ln2_;
  ops::LinearParams qkv_, proj_, fc1_, fc2_;  // fc1 = gate_up and fc2 = down under SwiGLU
  // Mixture of experts: the router, the shared expert (gate_up, down) and its gate, and this
  // rank's experts (w [E/ep, out, in]: fc1 h -> 2·f_e/etp, fc2 f_e/etp -> h).
  ops::MoeDims moe_;
  ops::LinearParams router_, shared_fc1_, shared_fc2_, shared_gate_, experts_fc1_, experts_fc2_;
  at::Tensor gather_buffer_;
  ops::Region core_region_, block_region_;
  // Megatron's --recompute-modules under selective recompute (BlockRun::recompute_modules): the
  // modules the forward running now recomputes, the regions its checkpoints replay, and the
  // CheckpointWithoutOutput states whose backward has not run yet.
  uint32_t modules_ = 0;
  ops::Region mlp_region_, moe_region_, shared_region_;
  std::vector<std::shared_ptr<ops::CheckpointWithoutOutput::State>> without_output_;
  // Runs `region` on `inputs` as a CheckpointWithoutOutput whose state this block keeps.
  ops::CheckpointWithoutOutput without_output(ops::Region region, std::vector<at::Tensor> inputs, at::Tensor& out);
};

// The embedding (lower_embedding): vocab lookup, learned positions (GPT), dropout. Its input is
// the token ids [s, b].
class Embedding final : public LayerBase {
 public:
  using LayerBase::LayerBase;
  void init_params() override;
  at::Tensor forward(const at::Tensor& tokens) override;
  std::vector<std::pair<at::Tensor*, at::Tensor*>> params_and_grads() override;

 private:
  ops::LinearParams word_, position_;  // tables [V, h] and [max positions, h]
};

// The head (lower_head): final norm, LM head, fp32 cast, vocab cross entropy against fixed
// labels; its output is the per-token loss [s, b] (fp32).
class Head final : public LayerBase {
 public:
  Head(const BlockRun& r, at::ScalarType dtype);  // makes the constant labels
  void init_params() override;
  at::Tensor forward(const at::Tensor& x) override;
  std::vector<std::pair<at::Tensor*, at::Tensor*>> params_and_grads() override;

 private:
  at::Tensor labels_;
  ops::NormParams norm_;
  ops::LinearParams lm_head_;
};

}  // namespace mist::executor
