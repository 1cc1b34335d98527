// Activation memory of one layer for one micro-batch, from the ops' saved tensors and a liveness
// walk over its forward and backward (tensors freed at their last use, gradients freed once their
// producer's backward has run). Views share their base's storage.
#pragma once

#include <vector>

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

namespace mist::graph {

// The allocations and frees of one layer for one micro-batch, in the order the liveness walk makes
// them, with every size bound: what a caching allocator sees (analysis/allocation_trace.hpp).
enum class TraceMode {
  kSaveAll,    // no recompute: the forward keeps what its ops save
  kSelective,  // the layer's SelectivePolicy
  kFull,       // a fully recomputed layer: the forward keeps its input, the backward replays it
};

struct LayerTrace {
  struct Event {
    bool alloc = true;
    int key = 0;       // a storage of this layer (see the keys below)
    double bytes = 0;  // of an allocation
  };
  std::vector<Event> forward, backward;
  // Keys shared with the neighbouring layers: the input storage (made upstream: the forward frees it
  // when it keeps no reference), the output storage (passed downstream), the output's gradient
  // (made downstream; the backward frees it) and the input's gradient (passed upstream; -1: none).
  int input_key = -1, output_key = -1, output_grad_key = -1, input_grad_key = -1;
  double saved_bytes = 0;  // what the forward leaves allocated besides its output
};

// `all` binds every symbol of the layer's sizes (shape symbols, b, t).
LayerTrace trace_layer(const Layer& layer, const sym::Bindings& all, TraceMode mode);

}  // namespace mist::graph
