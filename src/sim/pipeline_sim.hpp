// Discrete-event simulation of one training iteration of a pipeline-parallel plan: 1F1B and
// interleaved 1F1B (Megatron's schedules), per-stage compute, collective, host-to-device and
// device-to-host streams. It checks the closed form of analysis/time_model.hpp and draws the
// timeline (`mist simulate --trace`). docs/simulation.md describes the model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/json_fields.hpp"

namespace mist::sim {

enum class Stream { kCompute, kCollective, kHostToDevice, kDeviceToHost };
inline constexpr int kNumStreams = 4;
const char* stream_name(Stream s);  // "compute", "collective", "h2d", "d2h"

// What one stage does for one micro-batch, in seconds. With v interleaved chunks every chunk
// takes 1/v of fwd, bwd, the copies and the activations, or its chunk_share.
struct StageWork {
  double fwd = 0;              // forward of one micro-batch through the stage (all its chunks)
  double bwd = 0;              // backward, recompute included
  double first_fwd_extra = 0;  // collective stream, before the iteration's first forward (blocks it)
  double last_bwd_extra = 0;   // collective stream, after the iteration's last backward
  std::string first_fwd_extra_name = "first_forward_extra";
  std::string last_bwd_extra_name = "last_backward_extra";
  // One send on the sender's collective stream, per micro-batch and chunk: the output activation
  // to the next (virtual) stage, the input gradient to the previous one.
  double p2p_fwd = 0;
  double p2p_bwd = 0;
  // Offload copies issued when a forward / backward starts, on the H2D and D2H streams; the
  // stage's next compute task waits for them (prefetch of the next layers' data).
  double fwd_h2d = 0, fwd_d2h = 0, bwd_h2d = 0, bwd_d2h = 0;
  // Memory, for the memory-over-time series: bytes held before the iteration starts (states,
  // buffers) and saved activations one micro-batch adds when its forward ends and frees when its
  // backward ends.
  double base_bytes = 0;
  double activation_bytes_per_micro_batch = 0;
  // Each chunk's share of the above (v entries adding up to 1) where the chunks differ in size;
  // empty: 1/v each.
  std::vector<double> chunk_share{};
};

struct PipelineJob {
  std::vector<StageWork> stages;  // pp entries
  int64_t micro_batches = 1;      // G
  int64_t virtual_stages = 1;     // v: chunks per stage (interleaved 1F1B when > 1; G % pp == 0)
};

struct Event {
  int stage = 0;
  Stream stream = Stream::kCompute;
  std::string name;  // "F3" (forward of micro-batch 3), "B3", "F3.c1" (chunk 1), "send F3", ...
  double start = 0, end = 0;
};

struct MemorySample {
  int stage = 0;
  double time = 0;
  double bytes = 0;  // held from `time` on
};

struct SimResult {
  double makespan = 0;               // iteration time, seconds
  std::vector<Event> events;         // every task on every stream, in start order per stream
  std::vector<MemorySample> memory;  // per stage, at 0 and at every change, in time order
  std::vector<double> peak_bytes;    // per stage
  std::vector<double> compute_busy;     // per stage: seconds the compute stream runs
  std::vector<double> collective_busy;  // per stage: seconds the collective stream runs
};

// The order in which stage `stage` runs its forward and backward (chunk) tasks under Megatron's
// schedule: 1F1B when v == 1, forward_backward_pipelining_with_interleaving when v > 1.
struct ScheduleStep {
  bool forward = true;
  int64_t micro_batch = 0;
  int64_t chunk = 0;
};
std::vector<ScheduleStep> stage_schedule(int pp, int stage, int64_t micro_batches, int64_t v);

// Simulates the schedule: a task starts when its stream on its stage is free and its
// dependencies (previous stage's forward, next stage's backward, incl. p2p) have finished.
// Compute streams run their schedule in order; the other streams run tasks in the order they
// become ready. Fails on an invalid job (no stages, negative times, G % pp != 0 when interleaved).
Result<SimResult> simulate(const PipelineJob& job);

// Chrome trace (the JSON Trace Event Format; Perfetto loads it): one process per stage, one
// thread per stream, plus counter events for memory. Times in microseconds.
Json chrome_trace(const SimResult& r);

}  // namespace mist::sim
