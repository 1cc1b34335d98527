#include "graph/liveness.hpp"

#include <map>
#include <set>

namespace mist::graph {

namespace {

struct Walk {
  const Layer& L;
  const sym::Bindings& dims;

  int storage(int id) const { return L.tensors[id].view_of >= 0 ? L.tensors[id].view_of : id; }
  Expr bytes(int storage_id) const { return sym::substitute(L.tensors[storage_id].bytes, dims); }
  Expr total(const std::set<int>& live) const {
    std::vector<Expr> v;
    for (int s : live) v.push_back(bytes(s));
    return sym::sum(v);
  }

  std::set<int> saved_storages(bool selective) const {
    std::set<int> out;
    std::set<int> produced_by_core;
    for (const auto& op : L.ops)
      if (op.attention_core)
        for (int t : op.outputs) produced_by_core.insert(storage(t));
    for (const auto& op : L.ops) {
      if (selective && op.attention_core) {
        // The recomputed region keeps only its inputs from outside the region.
        for (int t : op.inputs)
          if (!produced_by_core.count(storage(t))) out.insert(storage(t));
        continue;
      }
      for (int t : op.saved) out.insert(storage(t));
    }
    return out;
  }

  Expr forward_peak(const std::set<int>& saved) const {
    const int n = static_cast<int>(L.ops.size());
    std::map<int, int> last_use;
    for (int i = 0; i < n; ++i)
      for (int t : L.ops[i].inputs) last_use[storage(t)] = i;
    const int output = storage(L.output);
    std::set<int> live;
    std::vector<Expr> steps;
    for (int i = 0; i < n; ++i) {
      const Op& op = L.ops[i];
      for (int t : op.outputs)
        if (L.tensors[t].view_of < 0) live.insert(t);
      std::set<int> with_temps = live;
      for (int t : op.temporaries) with_temps.insert(t);
      steps.push_back(total(with_temps));
      for (auto it = live.begin(); it != live.end();) {
        int s = *it;
        auto lu = last_use.find(s);
        bool dead = lu != last_use.end() && lu->second <= i && !saved.count(s) && s != output;
        // An output nobody reads (a statistic, a mask) lives only if saved.
        bool unused = lu == last_use.end() && !saved.count(s) && s != output;
        it = dead || unused ? live.erase(it) : std::next(it);
      }
    }
    return sym::max(steps);
  }

  // With `recompute_core`, the attention core's saved tensors are rebuilt just before its
  // backward (selective recompute), so they are live from then until their savers have run.
  Expr backward_peak(const std::set<int>& saved, bool recompute_core) const {
    const int n = static_cast<int>(L.ops.size());
    // A saved storage is freed after the backward of the earliest op that saves it.
    std::map<int, int> first_saver;
    for (int i = n - 1; i >= 0; --i)
      for (int t : L.ops[i].saved)
        if (saved.count(storage(t))) first_saver[storage(t)] = i;
    std::set<int> live_saved = saved;
    std::set<int> grads;           // storages whose gradient is allocated
    std::set<int> aliased;         // gradients living in a saved storage (in-place backward)
    auto grad_bytes = [&]() {
      std::vector<Expr> v;
      for (int s : grads)
        if (!aliased.count(s)) v.push_back(bytes(s));
      return sym::sum(v);
    };
    grads.insert(storage(L.output));
    std::vector<Expr> steps;
    for (int i = n - 1; i >= 0; --i) {
      const Op& op = L.ops[i];
      for (int t : op.inputs) {
        int s = storage(t);
        if (!L.tensors[t].requires_grad || grads.count(s)) continue;
        grads.insert(s);
        if (op.backward_in_place && live_saved.count(s)) aliased.insert(s);
      }
      std::set<int> held = live_saved;
      if (recompute_core && op.attention_core)
        for (int j = 0; j <= i; ++j)
          if (L.ops[j].attention_core)
            for (int t : L.ops[j].saved) held.insert(storage(t));
      std::vector<Expr> now{total(held), grad_bytes()};
      for (int t : op.temporaries) now.push_back(bytes(t));
      steps.push_back(sym::sum(now));
      for (int t : op.outputs) {
        int s = storage(t);
        if (s != storage(L.input)) grads.erase(s), aliased.erase(s);
      }
      for (auto it = live_saved.begin(); it != live_saved.end();) {
        auto fs = first_saver.find(*it);
        bool done = (fs == first_saver.end() || fs->second >= i) && !aliased.count(*it);
        it = done ? live_saved.erase(it) : std::next(it);
      }
    }
    return sym::max(steps);
  }
};

}  // namespace

LayerActivations analyze_activations(const Layer& layer, const sym::Bindings& dims) {
  Walk w{layer, dims};
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
  a.saved_tensor_count = static_cast<int>(full.size());
  return a;
}

}  // namespace mist::graph
