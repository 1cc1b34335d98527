#include "executor/tracking_allocator.hpp"

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <new>

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

namespace mist::executor {

namespace {

// Each block carries a 64-byte header (size and class) in front of the data, so the raw deleter
// needs no table; 64 keeps the data aligned as LibTorch's default allocator does.
constexpr size_t kHeader = 64;
constexpr size_t kAlignment = 64;
struct Header {
  size_t bytes;
  AllocClass cls;
  int64_t id;  // > 0: allocated during a recording (recorded), 0: not
};
static_assert(sizeof(Header) <= kHeader);

std::atomic<int64_t> g_live[kAllocClasses];
std::atomic<int64_t> g_peak_activation{0}, g_peak_window{0}, g_peak_scratch{0}, g_count{0};
std::atomic<uint8_t> g_class{0};
std::atomic<bool> g_installed{false};

// The recorder. g_recording is read without the lock on every allocation and free; the events,
// the id counter and the first id of the recording are guarded by g_record_mutex.
std::atomic<bool> g_recording{false};
std::mutex g_record_mutex;
std::vector<RecordedEvent> g_events;
int64_t g_next_id = 1;   // ids are never reused, across recordings too
int64_t g_first_id = 1;  // the first id of the current recording
int64_t g_generation = 0;  // counts starts and stops: a pause outliving its recording restores nothing

int64_t record_alloc(size_t bytes) {
  std::lock_guard<std::mutex> lock(g_record_mutex);
  if (!g_recording.load(std::memory_order_relaxed)) return 0;
  const int64_t id = g_next_id++;
  g_events.push_back({true, id, static_cast<int64_t>(bytes)});
  return id;
}

void record_free(const Header& h) {
  std::lock_guard<std::mutex> lock(g_record_mutex);
  // A block of an earlier recording is freed after this one started: not part of this one.
  if (!g_recording.load(std::memory_order_relaxed) || h.id < g_first_id) return;
  g_events.push_back({false, h.id, static_cast<int64_t>(h.bytes)});
}

void raise_to(std::atomic<int64_t>& peak, int64_t value) {
  int64_t p = peak.load(std::memory_order_relaxed);
  while (value > p && !peak.compare_exchange_weak(p, value, std::memory_order_relaxed)) {
  }
}

int64_t scratch_live() {
  return g_live[static_cast<int>(AllocClass::kWorkspace)].load() +
         g_live[static_cast<int>(AllocClass::kWeightGrad)].load();
}

void release(void* data) {
  if (data == nullptr) return;
  auto* base = static_cast<char*>(data) - kHeader;
  const auto* h = reinterpret_cast<const Header*>(base);
  if (h->id > 0 && g_recording.load(std::memory_order_relaxed)) record_free(*h);
  g_live[static_cast<int>(h->cls)].fetch_sub(static_cast<int64_t>(h->bytes));
  std::free(base);
}

class TrackingAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t bytes) const override {
    void* base = nullptr;
    if (posix_memalign(&base, kAlignment, bytes + kHeader) != 0) throw std::bad_alloc();
    const auto cls = static_cast<AllocClass>(g_class.load(std::memory_order_relaxed));
    int64_t id = 0;
    if (cls == AllocClass::kActivation && g_recording.load(std::memory_order_relaxed)) id = record_alloc(bytes);
    *static_cast<Header*>(base) = Header{bytes, cls, id};
    void* data = static_cast<char*>(base) + kHeader;
    const int64_t live = g_live[static_cast<int>(cls)].fetch_add(static_cast<int64_t>(bytes)) +
                         static_cast<int64_t>(bytes);
    if (cls == AllocClass::kActivation) {
      raise_to(g_peak_activation, live);
      raise_to(g_peak_window, live);
    } else {
      raise_to(g_peak_scratch, scratch_live());
    }
    g_count.fetch_add(1, std::memory_order_relaxed);
    // raw_allocate() (used by oneDNN) requires the context to be the data pointer.
    return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
};

TrackingAllocator g_allocator;

}  // namespace

void install_tracking_allocator() {
  if (g_installed.exchange(true)) return;
  // Priority above the default allocator's 0, so no later registration replaces it.
  c10::SetCPUAllocator(&g_allocator, /*priority=*/100);
}

bool tracking_allocator_installed() { return g_installed.load(); }

void* cpu_allocate(size_t bytes) { return c10::GetCPUAllocator()->raw_allocate(bytes); }
void cpu_free(void* data) { c10::GetCPUAllocator()->raw_deallocate(data); }

int64_t live_bytes(AllocClass c) { return g_live[static_cast<int>(c)].load(); }
int64_t peak_activation_bytes() { return g_peak_activation.load(); }
int64_t peak_scratch_bytes() { return g_peak_scratch.load(); }
int64_t allocation_count() { return g_count.load(); }
int64_t window_peak_bytes() { return g_peak_window.load(); }
void reset_window_peak() { g_peak_window.store(live_bytes(AllocClass::kActivation)); }

void reset_peaks() {
  g_peak_activation.store(live_bytes(AllocClass::kActivation));
  g_peak_scratch.store(scratch_live());
}

void start_recording() {
  std::lock_guard<std::mutex> lock(g_record_mutex);
  g_events.clear();
  g_first_id = g_next_id;
  ++g_generation;
  g_recording.store(true);
}

std::vector<RecordedEvent> stop_recording() {
  std::lock_guard<std::mutex> lock(g_record_mutex);
  g_recording.store(false);
  ++g_generation;
  std::vector<RecordedEvent> out;
  out.swap(g_events);
  return out;
}

bool recording() { return g_recording.load(); }

size_t recorded_events() {
  std::lock_guard<std::mutex> lock(g_record_mutex);
  return g_events.size();
}

ScopedRecordingPause::ScopedRecordingPause() {
  std::lock_guard<std::mutex> lock(g_record_mutex);
  was_on_ = g_recording.exchange(false);
  generation_ = g_generation;
}
ScopedRecordingPause::~ScopedRecordingPause() {
  std::lock_guard<std::mutex> lock(g_record_mutex);
  if (was_on_ && generation_ == g_generation) g_recording.store(true);
}

ScopedAllocClass::ScopedAllocClass(AllocClass c)
    : previous_(static_cast<AllocClass>(g_class.exchange(static_cast<uint8_t>(c)))) {}
ScopedAllocClass::~ScopedAllocClass() { g_class.store(static_cast<uint8_t>(previous_)); }

}  // namespace mist::executor
