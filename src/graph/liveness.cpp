#include "graph/liveness.hpp"

#include "graph/liveness_walk.hpp"

namespace mist::graph {


LayerActivations analyze_activations(const Layer& layer, const sym::Bindings& dims) {
  detail::Walk w{layer, dims};
  LayerActivations a;
  auto full = w.saved_storages(false);
  auto sel = w.saved_storages(true);
  a.saved = w.total(full);
  a.saved_selective = w.total(sel);
  a.input = w.bytes(w.storage(layer.input));
  a.output = w.bytes(w.storage(layer.output));
  a.fwd_peak = w.forward_peak(full);
  a.bwd_peak = w.backward_peak(full, false);
  a.bwd_peak_selective = w.backward_peak(sel, true);
  a.fwd_peak_selective = w.forward_peak(sel);
  a.bwd_peak_recomputed = w.recomputed_peak();
  a.saved_tensor_count = static_cast<int>(full.size());
  return a;
}

}  // namespace mist::graph
