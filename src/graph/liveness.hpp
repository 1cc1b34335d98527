// Activation memory of one layer for one micro-batch, from the ops' saved tensors and a liveness
// walk over its forward and backward (tensors freed at their last use, gradients freed once their
// producer's backward has run). Views share their base's storage.
#pragma once

#include "graph/layer.hpp"

namespace mist::graph {

struct LayerActivations {
  Expr saved;            // bytes kept for backward (includes the layer input when an op saves it)
  Expr saved_selective;  // the same under selective recompute (the layer's SelectivePolicy)
  Expr input;            // bytes of the layer input: all a fully recomputed layer keeps
  Expr output;           // bytes of the layer output
  Expr fwd_peak;         // most bytes this layer holds at once during its forward (input excluded)
  Expr bwd_peak;         // most bytes held during its backward: saved tensors still needed + grads
  Expr bwd_peak_selective;  // the same when the selective policy's ops were not saved but are recomputed
  Expr fwd_peak_selective;  // the forward peak under the selective policy
  // The backward of a fully recomputed layer (Megatron's CheckpointFunction): it keeps only its
  // input, replays its forward with grad, then back-propagates while holding the recomputed
  // output and the incoming gradient. Counts the input.
  Expr bwd_peak_recomputed;
  int saved_tensor_count = 0;  // distinct storages saved (allocator rounding is per allocation)
};

// `dims` binds shape symbols (s, h, ...) before the peaks are maximised, so that max() can drop
// dominated steps; pass {} to keep every symbol free.
LayerActivations analyze_activations(const Layer& layer, const sym::Bindings& dims);

}  // namespace mist::graph
