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

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mist::executor {

enum class AllocClass : uint8_t { kActivation = 0, kWorkspace = 1, kWeightGrad = 2 };
inline constexpr int kAllocClasses = 3;

// Installs the tracking allocator as LibTorch's CPU allocator (idempotent). Tensors made before
// the first call are not seen; call it before creating any.
void install_tracking_allocator();
bool tracking_allocator_installed();

// A block from LibTorch's CPU allocator (the tracking one once installed), as a tensor's storage
// gets it, and its release: for tests and tools that do not include LibTorch's headers.
void* cpu_allocate(size_t bytes);
void cpu_free(void* data);

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

// The sequence of kActivation allocations and frees, in the order the allocator saw them (the
// classes mist models as something else, kWorkspace and kWeightGrad, are left out, as in the
// peaks). Each allocation gets an id of its own, kept in its block's header, so a pointer that
// malloc hands out again after a free gets a new id. Frees of blocks allocated before
// start_recording() (or while paused) are not recorded. Recording is process-wide, like the
// class; OpenMP workers record under the driving thread's class (a mutex orders them). With no
// recording on, allocate and free pay one relaxed atomic load.
struct RecordedEvent {
  bool alloc = true;
  int64_t id = 0;     // > 0, unique per allocation since the process started
  int64_t bytes = 0;  // the allocation's size (also on its free)
};
// Starts a new recording (drops whatever an unfinished one had).
void start_recording();
// Ends it and returns its events.
std::vector<RecordedEvent> stop_recording();
bool recording();
// Events recorded so far by the current recording (a mark to split it into phases).
size_t recorded_events();
// While one lives, nothing is recorded: allocations made then are untracked (as if made before
// the recording), frees of recorded blocks are dropped. Restores the previous state on exit,
// unless the recording was stopped or restarted meanwhile.
class ScopedRecordingPause {
 public:
  ScopedRecordingPause();
  ~ScopedRecordingPause();
  ScopedRecordingPause(const ScopedRecordingPause&) = delete;
  ScopedRecordingPause& operator=(const ScopedRecordingPause&) = delete;

 private:
  bool was_on_ = false;
  int64_t generation_ = 0;
};

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
