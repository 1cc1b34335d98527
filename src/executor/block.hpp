// One transformer block as the lowering builds it (graph/lower.cpp lower_block): same ops, same
// names, same saved tensors; checkpointing wraps the attention core (selective) or the whole
// block (full) in ops::checkpoint.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "executor/executor.hpp"
#include "executor/functions.hpp"

namespace mist::executor {

class Block {
 public:
  Block(const BlockRun& r, at::ScalarType dtype);  // makes the constant rotary tables only
  void init_params();       // weights in the training dtype
  void init_main_grads();   // fp32 gradient accumulators, zeroed
  void init_optimizer();    // AdamW state: fp32 master (mixed precision only), m, v
  int64_t param_count() const;

  at::Tensor forward(const at::Tensor& x);  // with the run's checkpointing
  void adamw_step(double lr);
  bool weights_finite() const;

  const std::vector<std::string>& op_names() const { return names_; }
  // Each parameter with its fp32 gradient accumulator.
  std::vector<std::pair<at::Tensor*, at::Tensor*>> params_and_grads();
  // The next forward counts as micro-batch n (dropout masks depend on it).
  void set_micro_batch(int64_t n) { micro_batch_ = n - 1; }

 private:
  int id(const std::string& name);
  ops::LinearParams linear_params(int64_t in, int64_t out, bool bias);
  ops::NormParams norm_params();
  // Activations by value, moved in at their last use, so each is freed when no op needs it.
  at::Tensor body(const at::Tensor& x, bool checkpoint_core);
  at::Tensor attention(at::Tensor x, bool checkpoint_core);
  at::Tensor core(at::Tensor q, at::Tensor k, at::Tensor v);
  at::Tensor mlp(at::Tensor x);
  at::Tensor maybe_dropout(at::Tensor x, const char* name);

  BlockRun run_;
  at::ScalarType dtype_;
  ops::AttnDims dims_;
  at::Tensor cos_, sin_;
  ops::NormParams ln1_, ln2_;
  ops::LinearParams qkv_, proj_, fc1_, fc2_;  // fc1 = gate_up and fc2 = down under SwiGLU
  std::vector<at::Tensor> master_, exp_avg_, exp_avg_sq_;
  int64_t step_ = 0, micro_batch_ = 0;
  std::vector<std::string> names_;
  ops::Region core_region_, block_region_;
};

}  // namespace mist::executor
