// The liveness walk over one layer's forward and backward, shared by the symbolic peaks
// (liveness.cpp) and the concrete allocation trace (layer_trace.cpp). Internal to graph/.
#pragma once

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "graph/layer.hpp"

namespace mist::graph::detail {

// Receives the walk's allocations and frees when it runs with every symbol bound (layer_trace.cpp).
// Keys: a tensor's storage is its id; gradient buffers and transients get keys of their own.
class Recorder {
 public:
  virtual ~Recorder() = default;
  virtual void alloc(int key, int tensor) = 0;             // a tensor's storage (bytes: the tensor's)
  virtual void alloc_grad(int buffer, const Expr& bytes) = 0;  // a gradient buffer
  virtual void free(int key) = 0;
  virtual void free_grad(int buffer) = 0;
  virtual void transient(const Expr& bytes) = 0;           // allocated and freed within one step
  virtual void end_step() = 0;                             // frees the step's transients
};

// Gradient buffers during a backward walk, as PyTorch's autograd engine holds them:
// - an op's backward allocates a fresh gradient for each input that requires one, except an add,
//   whose inputs receive the output's gradient itself (AddBackward passes it through);
// - a tensor read by several ops accumulates its gradients in one buffer: in place when that
//   buffer is held by this tensor alone, else the fresh gradient takes over (InputBuffer::add);
// - a view gets a gradient of its own size; the split's backward concatenates the views'
//   gradients into a new buffer for their base.
// Keys are tensor ids (a view has its own key; its base's key is the base's id).
struct Grads {
  Recorder* rec = nullptr;
  std::map<int, int> of;     // tensor -> buffer
  std::map<int, Expr> size;  // live buffer -> bytes
  std::map<int, int> refs;   // live buffer -> tensors bound to it
  int next = 0;

  int alloc(const Expr& bytes) {
    size[next] = bytes;
    refs[next] = 0;
    if (rec) rec->alloc_grad(next, bytes);
    return next++;
  }
  bool has(int t) const { return of.count(t) > 0; }
  int holders(int t) const { return refs.at(of.at(t)); }
  void bind(int t, int buf) {
    of[t] = buf;
    ++refs[buf];
  }
  void unbind(int t) {
    auto it = of.find(t);
    if (it == of.end()) return;
    if (--refs[it->second] == 0) {
      if (rec) rec->free_grad(it->second);
      size.erase(it->second), refs.erase(it->second);
    }
    of.erase(it);
  }
  std::vector<Expr> sizes() const {
    std::vector<Expr> v;
    for (const auto& [b, e] : size) v.push_back(e);
    return v;
  }
};

// Trace keys of the outputs CheckpointWithoutOutput copies back (Backward::restored): the storage's
// id above this (the replay's own copy keeps the id itself).
constexpr int kRestoredKey = 1 << 23;

struct Walk {
  const Layer& L;
  const sym::Bindings& dims;
  Recorder* rec = nullptr;  // set by layer_trace: every symbol of dims is then bound
  mutable int input_grad_buffer = -1;  // after a backward walk: the buffer holding the input's gradient

  bool is_view(int id) const { return L.tensors[id].view_of >= 0; }
  int storage(int id) const { return is_view(id) ? L.tensors[id].view_of : id; }
  // The tensor's own bytes (a view's size, not its base's).
  Expr bytes(int id) const { return sym::substitute(L.tensors[id].bytes, dims); }
  Expr total(const std::set<int>& storages) const {
    std::vector<Expr> v;
    for (int s : storages) v.push_back(bytes(s));
    return sym::sum(v);
  }

  bool whole_layer_policy() const { return L.selective == SelectivePolicy::kSaveOddMatmuls; }

  // Under torchtitan's op-level policy: the checkpoint's input and the outputs of the ops it keeps.
  // Eager PyTorch caches every such output; a compiled layer keeps only those its backward reads.
  std::set<int> kept_outputs() const {
    const std::set<int> read = L.compiled ? read_by_backward() : std::set<int>{};
    std::set<int> out;
    for (const auto& op : L.ops)
      if (!op.selective_recompute && op.kind != OpKind::kView)
        for (int t : op.outputs)
          if (!is_view(t) && (!L.compiled || read.count(t))) out.insert(t);
    return out;
  }

  // Storages the backward reads: what any op saves, and the inputs of the recomputed ops that
  // produce them (recompute runs from there), transitively.
  std::set<int> read_by_backward() const {
    std::set<int> read;
    for (const auto& op : L.ops)
      for (int t : op.saved) read.insert(storage(t));
    for (auto it = L.ops.rbegin(); it != L.ops.rend(); ++it) {
      if (!it->selective_recompute) continue;
      bool feeds = false;
      for (int t : it->outputs) feeds |= read.count(storage(t)) > 0;
      if (feeds)
        for (int t : it->inputs) read.insert(storage(t));
    }
    return read;
  }

  bool without_output(const Op& op) const { return op.selective_recompute && op.recompute_without_output; }

  // Whether an op outside [first, last] saves storage s (a module's output its consumers keep).
  bool saved_outside(int first, int last, int s) const {
    for (int j = 0; j < static_cast<int>(L.ops.size()); ++j)
      if (j < first || j > last)
        for (int t : L.ops[j].saved)
          if (storage(t) == s) return true;
    return false;
  }

  // The outputs of ops [first, last] that an op after `last` reads (what a run returns).
  std::vector<int> run_outputs(int first, int last) const {
    std::vector<int> out;
    for (int j = first; j <= last; ++j)
      for (int t : L.ops[j].outputs)
        if (!is_view(t) && read_after(last, t)) out.push_back(t);
    return out;
  }

  // Whether an op after `last` reads storage s.
  bool read_after(int last, int s) const {
    for (int j = last + 1; j < static_cast<int>(L.ops.size()); ++j)
      for (int t : L.ops[j].inputs)
        if (storage(t) == s) return true;
    return false;
  }

  // Ops j-1 and j belong to one recomputed run: both recomputed, alike (a checkpoint, or restored
  // without output at the same op).
  bool same_run(int j) const {
    const Op &a = L.ops[j - 1], &b = L.ops[j];
    return a.selective_recompute && b.selective_recompute && a.recompute_without_output == b.recompute_without_output &&
           (!a.recompute_without_output || a.restore_at == b.restore_at);
  }
  int run_first(int i) const {
    while (i > 0 && same_run(i)) --i;
    return i;
  }
  int run_last(int i) const {
    while (i + 1 < static_cast<int>(L.ops.size()) && same_run(i + 1)) ++i;
    return i;
  }

  std::set<int> saved_storages(bool selective) const {
    if (selective && whole_layer_policy()) {
      std::set<int> out = kept_outputs();
      out.insert(storage(L.input));
      return out;
    }
    std::set<int> out;
    std::set<int> produced_by_core;
    for (const auto& op : L.ops)
      if (op.selective_recompute)
        for (int t : op.outputs) produced_by_core.insert(storage(t));
    for (const auto& op : L.ops) {
      if (selective && op.selective_recompute) {
        // The recomputed region keeps only its inputs from outside the region.
        for (int t : op.inputs)
          if (!produced_by_core.count(storage(t))) out.insert(storage(t));
        continue;
      }
      for (int t : op.saved) out.insert(storage(t));
    }
    // CheckpointWithoutOutput frees its outputs although their consumers saved them.
    if (selective)
      for (const auto& op : L.ops)
        if (without_output(op))
          for (int t : op.outputs) out.erase(storage(t));
    return out;
  }

  // Live bytes at each op of a forward over ops [first, last]: outputs are allocated, tensors are
  // freed after their last reader unless saved (or the region's output). `base` is what is live
  // besides (the region replay of a selective recompute adds the backward state there).
  // `cached`: outputs a replay finds already computed (torchtitan's policy keeps them from the
  // forward): live from the start, their ops do not run again.
  void forward_steps(int first, int last, const std::set<int>& saved, int output, const Expr& base,
                     std::vector<Expr>& steps, std::set<int>* kept = nullptr,
                     const std::set<int>& cached = {}) const {
    std::map<int, int> last_use;
    for (int i = first; i <= last; ++i)
      for (int t : L.ops[i].inputs) last_use[storage(t)] = i;
    // An output restored later (Op::restore_at) is freed only once the module holding the hook
    // has run (discard_output_and_register_recompute follows it), if ops after its run saved it
    // (one inside the run is the module's own, freed as it goes).
    for (int i = first; i <= last; ++i) {
      const Op& op = L.ops[i];
      if (!without_output(op) || op.restore_at <= i) continue;
      for (int t : op.outputs)
        if (!is_view(t) && saved_outside(run_first(i), run_last(i), storage(t)))
          last_use[storage(t)] = std::max(last_use[storage(t)], std::min(op.restore_at, last));
    }
    // A tensor a module's Python local keeps (Tensor::held_until) lives until that op, or the end
    // of the region replayed.
    for (int i = first; i <= last; ++i)
      for (int t : L.ops[i].outputs)
        if (!is_view(t) && L.tensors[t].held_until > i)
          last_use[t] = std::max(last_use[t], std::min(L.tensors[t].held_until, last));
    std::set<int> live = cached;
    for (int i = first; i <= last; ++i) {
      const Op& op = L.ops[i];
      bool runs = false;
      for (int t : op.outputs)
        if (!is_view(t)) {
          runs |= !cached.count(t);
          if (L.tensors[t].external) continue;  // in a buffer outside the layer
          if (live.insert(t).second && rec) rec->alloc(t, t);
        }
      std::set<int> with_temps = live;
      if (runs)
        for (const auto* temps : {&op.temporaries, &op.fwd_temporaries})
          for (int t : *temps)
            if (with_temps.insert(t).second && rec) rec->transient(bytes(t));
      if (rec)
        rec->end_step();
      else  // a trace needs no live-byte sums
        steps.push_back(base + total(with_temps));
      for (auto it = live.begin(); it != live.end();) {
        int s = *it;
        auto lu = last_use.find(s);
        bool dead = lu != last_use.end() && lu->second <= i && !saved.count(s) && s != output;
        // An output nobody reads (a statistic, a mask) lives only if saved.
        bool unused = lu == last_use.end() && !saved.count(s) && s != output;
        if ((dead || unused) && rec) rec->free(s);
        it = dead || unused ? live.erase(it) : std::next(it);
      }
    }
    if (kept) *kept = live;
  }

  Expr forward_peak(const std::set<int>& saved) const {
    std::vector<Expr> steps;
    forward_steps(0, static_cast<int>(L.ops.size()) - 1, saved, storage(L.output), Expr(0.0), steps);
    return sym::max(steps);
  }

  struct Backward {
    std::set<int> live_saved;      // saved storages not yet released
    // Outputs restored without output (Op::restore_at): the copy back in the storage their
    // consumers saved, released after the earliest such consumer's backward (the replay's own copy
    // is in live_saved until the module's backward).
    std::map<int, int> restored;   // storage -> op index after whose backward it is released
    std::map<int, int> last_saver;  // storage -> op index after whose backward it is released
    std::set<int> aliased;          // gradients living in a saved storage (in-place backward)
    std::set<int> pinned;           // gradients kept past their producer (a checkpoint's output)
    Grads grads;
    std::vector<Expr> steps;
  };

  // The backward of op i: allocates its input gradients, records the live bytes, then releases
  // its output gradients and the saved tensors it was the last to need.
  void backward_op(int i, Backward& B, const Expr& extra) const {
    const Op& op = L.ops[i];
    std::vector<Expr> transient;
    std::vector<std::pair<int, Expr>> retake;  // tensor -> bytes of a new buffer after the step
    const int out0 = op.outputs.empty() ? -1 : op.outputs[0];
    for (int t : op.inputs) {
      if (!L.tensors[t].requires_grad) continue;
      if (op.kind == OpKind::kView) {
        // torch.split's backward: one new buffer for the base, replacing the views' gradients.
        retake.push_back({t, bytes(storage(t))});
        transient.push_back(bytes(storage(t)));
        continue;
      }
      if (op.kind == OpKind::kAdd && out0 >= 0 && B.grads.has(out0)) {
        if (!B.grads.has(t))
          B.grads.bind(t, B.grads.of.at(out0));
        else if (B.grads.holders(t) > 1)
          retake.push_back({t, bytes(t)}), transient.push_back(bytes(t));
        continue;
      }
      if (op.backward_in_place && B.live_saved.count(storage(t))) {
        B.grads.bind(t, B.grads.alloc(Expr(0.0)));  // lives in the saved storage
        B.aliased.insert(storage(t));
        continue;
      }
      if (!B.grads.has(t)) {
        B.grads.bind(t, B.grads.alloc(bytes(t)));
      } else {
        transient.push_back(bytes(t));  // the fresh gradient, added into the buffer
        if (B.grads.holders(t) > 1) retake.push_back({t, bytes(t)});
      }
    }
    for (int t : op.temporaries) transient.push_back(bytes(t));
    for (int t : op.bwd_temporaries) transient.push_back(bytes(t));
    if (rec) {
      for (const Expr& e : transient) rec->transient(e);
      rec->end_step();
    } else {
      std::vector<Expr> now = B.grads.sizes();
      now.push_back(total(B.live_saved));
      now.push_back(restored_bytes(B));
      now.push_back(extra);
      now.insert(now.end(), transient.begin(), transient.end());
      B.steps.push_back(sym::sum(now));
    }

    if (op.kind == OpKind::kView) {
      for (int t : op.outputs) B.grads.unbind(t);
    } else {
      for (int t : op.outputs)
        if (t != L.input && !B.pinned.count(t)) B.grads.unbind(t), B.aliased.erase(storage(t));
    }
    for (const auto& [t, b] : retake) {
      B.grads.unbind(t);
      B.grads.bind(t, B.grads.alloc(b));
    }
    for (auto it = B.live_saved.begin(); it != B.live_saved.end();) {
      auto ls = B.last_saver.find(*it);
      bool done = (ls == B.last_saver.end() || ls->second >= i) && !B.aliased.count(*it);
      if (done && rec) rec->free(*it);
      it = done ? B.live_saved.erase(it) : std::next(it);
    }
    for (auto it = B.restored.begin(); it != B.restored.end();) {
      const bool done = it->second >= i;
      if (done && rec) rec->free(kRestoredKey + it->first);
      it = done ? B.restored.erase(it) : std::next(it);
    }
  }

  Expr restored_bytes(const Backward& B) const {
    std::vector<Expr> v;
    for (const auto& [st, at] : B.restored) v.push_back(bytes(st));
    return sym::sum(v);
  }

  // Megatron's CheckpointWithoutOutput when the gradient reaches op `at`: each run restored there
  // (in forward order) replays its forward with grad, keeping what its ops save and its outputs
  // (until the run's own backward), and copies the outputs its consumers saved back into their
  // storages (B.restored).
  void restore_runs(int at, Backward& B) const {
    const int n = static_cast<int>(L.ops.size());
    for (int first = 0; first < n; ++first) {
      if (!without_output(L.ops[first]) || L.ops[first].restore_at != at || (first > 0 && same_run(first))) continue;
      const int last = run_last(first);
      std::set<int> keep, outputs;
      for (int j = first; j <= last; ++j) {
        for (int t : L.ops[j].saved) keep.insert(storage(t));
        // An output the run alone reads and nothing saves (the GELU experts' fp32 product before
        // its cast) is freed in the replay as in the forward.
        for (int t : L.ops[j].outputs)
          if (!is_view(t) && (read_after(last, t) || saved_outside(first, last, t))) keep.insert(t), outputs.insert(t);
      }
      std::vector<Expr> under;
      if (!rec) {
        under = B.grads.sizes();
        under.push_back(total(B.live_saved));
        under.push_back(restored_bytes(B));
      }
      std::set<int> kept;
      forward_steps(first, last, keep, -1, sym::sum(under), B.steps, &kept);
      for (int st : kept)
        if (B.live_saved.insert(st).second) B.last_saver[st] = first;
      for (int st : outputs) {
        int consumer = -1;  // the earliest op after the run that saves it
        for (int j = last + 1; j < n && consumer < 0; ++j)
          for (int t : L.ops[j].saved)
            if (storage(t) == st) consumer = j;
        if (consumer < 0 || B.restored.count(st)) continue;
        B.restored[st] = consumer;
        if (rec) rec->alloc(kRestoredKey + st, st);
        else B.steps.push_back(sym::sum({sym::sum(B.grads.sizes()), total(B.live_saved), restored_bytes(B)}));
      }
    }
  }

  // With `recompute_core` (selective recompute) the attention core runs as Megatron's
  // CheckpointFunction: when the backward reaches it, its forward is replayed with grad (keeping
  // what its ops save), then back-propagated; the recomputed output and its incoming gradient
  // stay referenced until the region's backward is over.
  Expr backward_peak(const std::set<int>& saved, bool recompute_core) const {
    if (recompute_core && whole_layer_policy()) return recomputed_peak(saved);
    const int n = static_cast<int>(L.ops.size());
    Backward B;
    B.grads.rec = rec;
    B.live_saved = saved;
    // A saved storage is released after the backward of the earliest op that saves it; under
    // selective recompute the checkpoint holds the core's inputs until the whole core is done.
    for (int i = n - 1; i >= 0; --i) {
      const Op& op = L.ops[i];
      if (recompute_core && op.selective_recompute) {
        const int first = run_first(i);
        for (int t : op.inputs)
          if (saved.count(storage(t))) B.last_saver[storage(t)] = first;
        continue;
      }
      for (int t : op.saved)
        if (saved.count(storage(t)) && (!B.last_saver.count(storage(t)) || B.last_saver[storage(t)] > i))
          B.last_saver[storage(t)] = i;
    }
    B.grads.bind(L.output, B.grads.alloc(bytes(L.output)));
    for (int i = n - 1; i >= 0; --i) {
      if (recompute_core) restore_runs(i, B);
      if (!(recompute_core && L.ops[i].selective_recompute) || without_output(L.ops[i])) {
        // CheckpointWithoutOutputFunction.backward holds the gradients of its run's outputs (its
        // args) until the backward through the whole run is done.
        const bool held = recompute_core && without_output(L.ops[i]);
        if (held && i == run_last(i))
          for (int t : run_outputs(run_first(i), i)) B.pinned.insert(t);
        backward_op(i, B, Expr(0.0));
        if (held && i == run_first(i))
          for (int t : run_outputs(i, run_last(i))) B.pinned.erase(t), B.grads.unbind(t);
        continue;
      }
      const int first = run_first(i);
      recompute_region(first, i, B);
      i = first;
    }
    input_grad_buffer = B.grads.has(L.input) ? B.grads.of.at(L.input) : -1;
    return rec ? Expr(0.0) : sym::max(B.steps);
  }

  // A fully recomputed layer: one checkpoint region spanning every op. `kept`: what the forward
  // kept besides the input (torchtitan's policy), found computed by the replay.
  Expr recomputed_peak(const std::set<int>& kept = {}) const {
    const int n = static_cast<int>(L.ops.size());
    Backward B;
    B.grads.rec = rec;
    B.live_saved = {storage(L.input)};
    B.last_saver[storage(L.input)] = 0;
    B.grads.bind(L.output, B.grads.alloc(bytes(L.output)));
    std::set<int> cached = kept;
    cached.erase(storage(L.input));
    recompute_region(0, n - 1, B, cached);
    input_grad_buffer = B.grads.has(L.input) ? B.grads.of.at(L.input) : -1;
    return rec ? Expr(0.0) : sym::max(B.steps);
  }

  void recompute_region(int first, int last, Backward& B, const std::set<int>& cached = {}) const {
    std::set<int> region_saved;
    for (int j = first; j <= last; ++j)
      for (int t : L.ops[j].saved) region_saved.insert(storage(t));
    const int out = L.ops[last].outputs[0];
    // Replay: the backward state so far is live underneath, outputs restored for it included (the
    // pre-MLP layernorm's, restored when the gradient reaches the recomputed MoE layer's output).
    std::vector<Expr> under;
    if (!rec) {
      under = B.grads.sizes();
      under.push_back(total(B.live_saved));
      under.push_back(restored_bytes(B));
    }
    std::set<int> kept;
    forward_steps(first, last, region_saved, storage(out), sym::sum(under), B.steps, &kept, cached);
    // The region's tensors join the saved set for the inner backward (inputs from outside are
    // already there); the recomputed output is held apart until the end.
    std::set<int> added;
    for (int s : kept)
      if (s != storage(out) && !B.live_saved.count(s)) added.insert(s), B.live_saved.insert(s);
    for (int j = last; j >= first; --j)
      for (int t : L.ops[j].saved)
        if (added.count(storage(t))) B.last_saver[storage(t)] = j;
    B.pinned.insert(out);
    for (int j = last; j >= first; --j) backward_op(j, B, bytes(storage(out)));
    B.pinned.erase(out);
    B.grads.unbind(out);
    for (int s : added) {
      if (rec && B.live_saved.count(s)) rec->free(s);
      B.live_saved.erase(s), B.last_saver.erase(s);
    }
  }
};

}  // namespace mist::graph::detail
