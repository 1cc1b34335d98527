// Shared by functions.cpp, attention.cpp and ring_attention.cpp: the op timer and helpers for custom Functions.
#pragma once

#include <chrono>
#include <cstdint>

#include <torch/csrc/autograd/custom_function.h>

#include "executor/functions.hpp"
#include "executor/tracking_allocator.hpp"

namespace mist::executor::ops::detail {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

extern std::vector<OpSample>* g_sink;
extern bool g_recomputing;  // set while a checkpointed region re-runs its forward

inline Phase forward_phase() { return g_recomputing ? Phase::kRecompute : Phase::kForward; }

// Records one sample for `op` when it goes out of scope.
class Timed {
 public:
  Timed(int op, Phase phase) : op_(op), phase_(phase), t0_(clock_seconds()) {
    if (g_sink != nullptr) reset_window_peak();
  }
  ~Timed() {
    if (g_sink == nullptr) return;
    const double s = clock_seconds() - t0_;
    g_sink->push_back({op_, phase_, s, live_bytes(AllocClass::kActivation), window_peak_bytes()});
  }
  Timed(const Timed&) = delete;
  Timed& operator=(const Timed&) = delete;

 private:
  int op_;
  Phase phase_;
  double t0_;
};

// Non-tensor arguments travel through saved_data as integers.
inline int64_t as_int(const void* p) { return static_cast<int64_t>(reinterpret_cast<intptr_t>(p)); }
template <class T>
const T* saved_ptr(AutogradContext* ctx, const char* key) {
  return reinterpret_cast<const T*>(static_cast<intptr_t>(ctx->saved_data[key].toInt()));
}

// out = a·b; anything the GEMM allocates inside (oneDNN reorders, packing) is workspace.
void mm_into(at::Tensor out, const at::Tensor& a, const at::Tensor& b);

}  // namespace mist::executor::ops::detail
