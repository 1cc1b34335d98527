// The liveness walk of liveness_walk.hpp run with every size bound, recording each allocation and
// free instead of summing live bytes: the sequence a caching allocator serves for one layer.
#include <map>

#include "graph/liveness.hpp"
#include "graph/liveness_walk.hpp"

namespace mist::graph {

namespace {

// Tensor storages keep their ids; gradient buffers and step transients are numbered above them.
constexpr int kGradKey = 1 << 20;
constexpr int kTransientKey = 1 << 21;

class TraceRecorder final : public detail::Recorder {
 public:
  TraceRecorder(const detail::Walk& w, const sym::Bindings& all) : w_(w), all_(all) {}

  void record_into(std::vector<LayerTrace::Event>* out) { out_ = out; }
  // The next gradient buffer already exists (made by the layer downstream): tracked, not allocated.
  void adopt_next_grad() { adopt_ = true; }
  // A storage made elsewhere that this layer now holds (its input), or hands on (its output).
  void adopt(int key, double bytes) { live_[key] = bytes; }
  void release(int key) { live_.erase(key); }
  double live_bytes() const {
    double sum = 0;
    for (const auto& [k, b] : live_) sum += b;
    return sum;
  }
  // Frees whatever the walk's bookkeeping still holds (autograd drops the layer's graph when its
  // backward is done), except `keep`.
  void free_all_but(int keep) {
    std::vector<int> keys;
    for (const auto& [k, b] : live_)
      if (k != keep) keys.push_back(k);
    for (int k : keys) free(k);
  }

  void alloc(int key, int tensor) override { put(key, value(w_.bytes(tensor))); }
  void alloc_grad(int buffer, const Expr& bytes) override {
    const double b = value(bytes);
    if (adopt_) {
      adopt_ = false;
      live_[kGradKey + buffer] = b;
      return;
    }
    if (b > 0) put(kGradKey + buffer, b);
  }
  void free(int key) override {
    auto it = live_.find(key);
    if (it == live_.end()) return;
    live_.erase(it);
    out_->push_back({false, key, 0});
  }
  void free_grad(int buffer) override { free(kGradKey + buffer); }
  void transient(const Expr& bytes) override {
    const double b = value(bytes);
    if (b <= 0) return;
    const int key = kTransientKey + next_transient_++;
    put(key, b);
    step_.push_back(key);
  }
  void end_step() override {
    for (int k : step_) free(k);
    step_.clear();
  }

 private:
  double value(const Expr& e) const { return sym::evaluate_or_zero(e, all_); }
  void put(int key, double bytes) {
    if (bytes <= 0 || live_.count(key)) return;
    live_[key] = bytes;
    out_->push_back({true, key, bytes});
  }

  const detail::Walk& w_;
  const sym::Bindings& all_;
  std::vector<LayerTrace::Event>* out_ = nullptr;
  std::map<int, double> live_;
  std::vector<int> step_;
  int next_transient_ = 0;
  bool adopt_ = false;
};

}  // namespace

LayerTrace trace_layer(const Layer& layer, const sym::Bindings& all, TraceMode mode) {
  detail::Walk w{layer, all};
  TraceRecorder rec(w, all);
  w.rec = &rec;
  LayerTrace t;
  t.input_key = w.storage(layer.input);
  t.output_key = w.storage(layer.output);
  t.output_grad_key = kGradKey;  // the backward walk's first buffer: the output's gradient

  std::set<int> saved;
  if (mode == TraceMode::kFull)
    saved = {t.input_key};
  else
    saved = w.saved_storages(mode == TraceMode::kSelective);

  rec.record_into(&t.forward);
  rec.adopt(t.input_key, sym::evaluate_or_zero(w.bytes(t.input_key), all));
  std::vector<Expr> steps;
  w.forward_steps(0, static_cast<int>(layer.ops.size()) - 1, saved, t.output_key, Expr(0.0), steps, nullptr,
                  {t.input_key});
  // The output now belongs downstream; what is left is what this layer keeps for its backward.
  rec.release(t.output_key);
  t.saved_bytes = rec.live_bytes();

  rec.record_into(&t.backward);
  rec.adopt_next_grad();
  if (mode == TraceMode::kFull)
    w.recomputed_peak();
  else
    w.backward_peak(w.saved_storages(mode == TraceMode::kSelective), mode == TraceMode::kSelective);
  t.input_grad_key = w.input_grad_buffer >= 0 ? kGradKey + w.input_grad_buffer : -1;
  rec.free_all_but(t.input_grad_key);
  return t;
}

}  // namespace mist::graph
