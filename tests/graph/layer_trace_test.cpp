#include <map>

#include <gtest/gtest.h>

#include "graph/liveness.hpp"
#include "graph/lower.hpp"

namespace mist::graph {
namespace {

double eval(const Expr& e, const sym::Bindings& b) { return sym::evaluate_or_zero(e, b); }

struct Replay {
  double start = 0, peak = 0, end = 0;
  int leaked_frees = 0;  // frees of keys not live
};

// Live bytes over a list of events, starting from `live` (key -> bytes).
Replay replay(const std::vector<LayerTrace::Event>& events, std::map<int, double>& live) {
  Replay r;
  for (const auto& [k, b] : live) r.start += b;
  double now = r.start;
  r.peak = now;
  for (const auto& e : events) {
    if (e.alloc) {
      EXPECT_FALSE(live.count(e.key)) << "allocated twice: " << e.key;
      live[e.key] = e.bytes;
      now += e.bytes;
      r.peak = std::max(r.peak, now);
    } else {
      auto it = live.find(e.key);
      if (it == live.end()) {
        ++r.leaked_frees;
        continue;
      }
      now -= it->second;
      live.erase(it);
    }
  }
  r.end = now;
  return r;
}

LoweringOptions options(bool torchtitan, bool sp) {
  LoweringOptions o;
  o.sequence_parallel = sp;
  o.flash_attention = true;
  if (torchtitan) {
    o.fused_projections = false;
    o.fused_cross_entropy = false;
    o.eager_elementwise = true;
    o.copies_around_attention = true;
    o.selective = SelectivePolicy::kSaveOddMatmuls;
  }
  return o;
}

// The trace is the liveness walk itself with every size bound: its live bytes peak where the
// symbolic peaks say, its forward leaves exactly the saved set, and every storage it makes it frees
// (except the gradient it passes upstream).
TEST(LayerTrace, ReplaysTheLivenessPeaks) {
  for (const char* name : {"gpt3-1.3b", "llama3-8b", "llama2-70b"})
    for (bool torchtitan : {false, true})
      for (bool sp : {false, true}) {
        const auto lm = lower(*spec::catalog_model(name), 4096, options(torchtitan, sp));
        sym::Bindings b = lm.dims;
        b["b"] = 2;
        b["t"] = sp ? 4 : 1;
        for (const Layer* L : {&lm.embedding, &lm.block, &lm.head}) {
          const auto a = analyze_activations(*L, lm.dims);
          for (TraceMode mode : {TraceMode::kSaveAll, TraceMode::kSelective, TraceMode::kFull}) {
            const std::string what = std::string(name) + " " + L->name + " mode " +
                                     std::to_string(static_cast<int>(mode)) + (torchtitan ? " torchtitan" : "");
            const auto t = trace_layer(*L, b, mode);
            const double input = eval(a.input, b), output = eval(a.output, b);
            std::map<int, double> live = {{t.input_key, input}};
            const Replay f = replay(t.forward, live);
            EXPECT_EQ(f.leaked_frees, 0) << what;
            const double saved = mode == TraceMode::kFull        ? input
                                 : mode == TraceMode::kSelective ? eval(a.saved_selective, b)
                                                                 : eval(a.saved, b);
            // The forward ends holding its saved set and its output (the input among the saved
            // when an op saves it).
            EXPECT_NEAR(f.end, saved + (live.count(t.output_key) && t.output_key != t.input_key ? output : 0),
                        1e-6 * saved + 1)
                << what;
            // The symbolic forward peak leaves the input out; the trace holds it until its last reader.
            if (mode == TraceMode::kSaveAll) {
              EXPECT_GE(f.peak + 1, eval(a.fwd_peak, b)) << what;
              EXPECT_LE(f.peak, eval(a.fwd_peak, b) + input + 1) << what;
            }
            live.erase(t.output_key);
            live[t.output_grad_key] = output;
            const Replay bw = replay(t.backward, live);
            const double want = mode == TraceMode::kFull        ? eval(a.bwd_peak_recomputed, b)
                                : mode == TraceMode::kSelective ? eval(a.bwd_peak_selective, b)
                                                                : eval(a.bwd_peak, b);
            EXPECT_NEAR(bw.peak, want, 1e-9 * want + 1) << what;
            // Only the input's gradient is left.
            ASSERT_LE(live.size(), 1u) << what;
            if (t.input_grad_key >= 0) {
              ASSERT_EQ(live.count(t.input_grad_key), 1u) << what;
              EXPECT_NEAR(live[t.input_grad_key], input, 1e-9 * input) << what;
            } else {
              EXPECT_TRUE(live.empty()) << what;
            }
          }
        }
      }
}

}  // namespace
}  // namespace mist::graph
