// A CPU allocator for LibTorch that counts every byte: installed with c10::SetCPUAllocator before
// any tensor exists, it sees each allocation and free, so live and peak bytes are exact.
//
// Allocations are tagged with a class so that measurements can set apart what mist models as
// something other than activations: allocations inside a BLAS/oneDNN call (mist's blas_workspace
// term; on a GPU, fused kernels keep such tiles on chip) and weight-gradient temporaries (Megatron
// accumulates weight gradients straight into the fp32 main_grad, gradient_accumulation_fusion).
// The class is process-wide, set by the one thread that drives the executor; the OpenMP workers
// of a kernel allocate under the class of the call they serve.
#pragma once

#include <cstdint>

namespace mist::executor {

enum class AllocClass : uint8_t { kActivation = 0, kWorkspace = 1, kWeightGrad = 2 };
inline constexpr int kAllocClasses = 3;

// Installs the tracking allocator as LibTorch's CPU allocator (idempotent). Tensors made before
// the first call are not seen; call it before creating any.
void install_tracking_allocator();
bool tracking_allocator_installed();

int64_t live_bytes(AllocClass c);
// Running maximum of live kActivation bytes since the last reset_peaks().
int64_t peak_activation_bytes();
// Running maximum of live kWorkspace + kWeightGrad bytes since the last reset_peaks().
int64_t peak_scratch_bytes();
int64_t allocation_count();
void reset_peaks();
// A second running maximum of live kActivation bytes, reset on its own (per-op traces).
int64_t window_peak_bytes();
void reset_window_peak();

// Tags allocations made while it lives (restores the previous class on exit).
class ScopedAllocClass {
 public:
  explicit ScopedAllocClass(AllocClass c);
  ~ScopedAllocClass();
  ScopedAllocClass(const ScopedAllocClass&) = delete;
  ScopedAllocClass& operator=(const ScopedAllocClass&) = delete;

 private:
  AllocClass previous_;
};

}  // namespace mist::executor
