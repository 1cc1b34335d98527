// Megatron's CheckpointWithoutOutput (Megatron-LM megatron/core/tensor_parallel/random.py,
// CheckpointWithoutOutput and CheckpointWithoutOutputFunction): the forward runs without grad and
// saves its inputs; discard_output_and_register_recompute empties the outputs' storages
// (untyped_storage().resize_(0)); a hook on the hook tensor's gradient re-runs the forward with
// grad, resizes those storages back and copies the recomputed values in (the storage copy leaves
// the tensors' version counters alone, so the saved tensors of later ops stay valid); the
// function's backward back-propagates through the recomputed outputs.
#include <cstring>

#include <ATen/ATen.h>
#include <ATen/native/Resize.h>
#include <torch/csrc/autograd/autograd.h>

#include "executor/functions_internal.hpp"

namespace mist::executor::ops {

struct CheckpointWithoutOutput::State {
  Region region;
  std::vector<at::Tensor> inputs;      // as saved for backward (the replay's inputs)
  std::vector<at::Tensor> outputs;     // the forward's outputs, until their storages are restored
  std::vector<size_t> output_bytes;    // their storages' sizes before the discard
  std::vector<at::Tensor> detached;    // the replay's inputs, whose gradients backward returns
  std::vector<at::Tensor> recomputed;  // the replay's outputs (Megatron's ctx.outputs)
  bool finished = false;

  void restore() {
    {
      at::AutoGradMode grad(true);
      struct Recomputing {  // reset even when the region throws
        Recomputing() { detail::g_recomputing = true; }
        ~Recomputing() { detail::g_recomputing = false; }
      } recomputing;
      for (const auto& in : inputs) detached.push_back(in.detach().requires_grad_(in.requires_grad()));
      recomputed = region(detached);
    }
    for (size_t i = 0; i < outputs.size(); ++i) {
      auto* storage = outputs[i].storage().unsafeGetStorageImpl();
      at::native::resize_bytes_cpu(storage, output_bytes[i]);
      std::memcpy(storage->data(), recomputed[i].data_ptr(), output_bytes[i]);
    }
    outputs.clear();  // the storages now live as long as the ops that saved them need them
    inputs.clear();
  }
};

namespace {

using detail::AutogradContext;
using detail::variable_list;

struct WithoutOutputFn : torch::autograd::Function<WithoutOutputFn> {
  static variable_list forward(AutogradContext* ctx, CheckpointWithoutOutput::State* st, at::TensorList inputs) {
    ctx->set_materialize_grads(false);
    ctx->saved_data["state"] = detail::as_int(st);
    ctx->save_for_backward(inputs.vec());
    return st->region(inputs.vec());  // grad mode is off here: nothing inside is kept
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto* st = const_cast<CheckpointWithoutOutput::State*>(
        detail::saved_ptr<CheckpointWithoutOutput::State>(ctx, "state"));
    if (st->recomputed.empty()) {  // no hook fired (the outputs were never discarded)
      st->inputs.clear();
      for (const auto& s : ctx->get_saved_variables()) st->inputs.push_back(s);
      st->outputs.clear();
      st->restore();
    }
    variable_list outs, gs;
    for (size_t i = 0; i < st->recomputed.size(); ++i)
      if (grads[i].defined() && st->recomputed[i].requires_grad()) outs.push_back(st->recomputed[i]), gs.push_back(grads[i]);
    torch::autograd::backward(outs, gs);
    variable_list result{at::Tensor()};
    for (auto& d : st->detached) result.push_back(d.grad());
    st->recomputed.clear();
    st->detached.clear();
    st->finished = true;
    return result;
  }
};

}  // namespace

CheckpointWithoutOutput::CheckpointWithoutOutput() : state_(std::make_shared<State>()) {}

std::vector<at::Tensor> CheckpointWithoutOutput::run(Region region, std::vector<at::Tensor> inputs) {
  state_->region = std::move(region);
  state_->inputs = inputs;
  auto out = WithoutOutputFn::apply(state_.get(), at::TensorList(inputs));
  state_->outputs = out;
  return out;
}

void CheckpointWithoutOutput::discard_output_and_restore_at(const at::Tensor& hook) {
  for (const auto& o : state_->outputs) {
    auto* storage = o.storage().unsafeGetStorageImpl();
    state_->output_bytes.push_back(storage->nbytes());
    at::native::resize_bytes_cpu(storage, 0);
  }
  std::shared_ptr<State> st = state_;
  hook.register_hook([st](const at::Tensor&) {
    if (st->recomputed.empty()) st->restore();
  });
}

bool CheckpointWithoutOutput::done(const State& s) { return s.finished; }

}  // namespace mist::executor::ops
