// The tracking allocator's recorder, the sequence measure_block records, and the `reserved` term
// of `mist validate` that replays it against mist's sequence (docs/validation.md, "Reserved
// memory").
#include <map>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "executor/executor.hpp"
#include "executor/tracking_allocator.hpp"
#include "executor/validation.hpp"
#include "executor_jobs.hpp"

namespace mist::executor {
namespace {

using allocator::Event;
using K = Event::Kind;
using spec::Dtype;

// What the allocator does with a sequence: every free matches a live allocation of the sequence,
// ids are not reused, and the live bytes at each step.
struct Walk {
  bool consistent = true;
  std::string problem;
  int64_t peak = 0, end = 0;
  int64_t peak_from(size_t from) const { return peaks_from.at(from); }
  std::vector<int64_t> live;        // after each event
  std::vector<int64_t> peaks_from;  // max live over [i, end)
};

Walk walk(const std::vector<Event>& s) {
  Walk w;
  std::map<int64_t, int64_t> live;
  std::set<int64_t> seen;
  int64_t now = 0;
  for (const auto& e : s) {
    if (e.kind == K::kAlloc) {
      if (!seen.insert(e.id).second) w.consistent = false, w.problem = "id reused: " + std::to_string(e.id);
      live[e.id] = e.bytes;
      now += e.bytes;
    } else {
      auto it = live.find(e.id);
      if (it == live.end()) {
        w.consistent = false, w.problem = "free of an id not live: " + std::to_string(e.id);
      } else {
        now -= it->second;
        live.erase(it);
      }
    }
    w.live.push_back(now);
    w.peak = std::max(w.peak, now);
  }
  w.end = now;
  w.peaks_from.assign(s.size() + 1, 0);
  for (size_t i = s.size(); i-- > 0;) w.peaks_from[i] = std::max(w.peaks_from[i + 1], w.live[i]);
  return w;
}

TEST(TrackingAllocator, RecordsAllocationsAndFreesInOrderWithTheirSizes) {
  install_tracking_allocator();
  void* before = cpu_allocate(100);  // made before the recording: its free is not recorded
  start_recording();
  EXPECT_TRUE(recording());
  void* a = cpu_allocate(4000);
  void* b = cpu_allocate(240);
  cpu_free(a);
  void* c = cpu_allocate(7);
  {
    ScopedAllocClass ws(AllocClass::kWorkspace);  // not an activation: not recorded
    cpu_free(cpu_allocate(1 << 20));
  }
  void* paused = nullptr;
  {
    ScopedRecordingPause pause;
    paused = cpu_allocate(333);
    cpu_free(b);  // dropped while paused
  }
  cpu_free(paused);  // allocated while paused: unknown to the recording
  cpu_free(before);
  cpu_free(c);
  EXPECT_EQ(recorded_events(), 5u);
  const auto ev = stop_recording();
  EXPECT_FALSE(recording());
  ASSERT_EQ(ev.size(), 5u);
  EXPECT_TRUE(ev[0].alloc);
  EXPECT_EQ(ev[0].bytes, 4000);
  EXPECT_TRUE(ev[1].alloc);
  EXPECT_EQ(ev[1].bytes, 240);
  EXPECT_FALSE(ev[2].alloc);
  EXPECT_EQ(ev[2].id, ev[0].id);
  EXPECT_EQ(ev[2].bytes, 4000);
  EXPECT_TRUE(ev[3].alloc);
  EXPECT_EQ(ev[3].bytes, 7);
  EXPECT_FALSE(ev[4].alloc);
  EXPECT_EQ(ev[4].id, ev[3].id);
  EXPECT_EQ(ev[4].bytes, 7);
  EXPECT_GT(ev[0].id, 0);
  EXPECT_NE(ev[0].id, ev[1].id);
  EXPECT_NE(ev[1].id, ev[3].id);
  EXPECT_TRUE(stop_recording().empty());  // nothing since
}

TEST(TrackingAllocator, IdsArePerAllocationNotPerPointer) {
  install_tracking_allocator();
  start_recording();
  std::set<void*> pointers;
  for (int i = 0; i < 200; ++i) {
    void* p = cpu_allocate(4096);  // malloc hands the same address out again after the free
    pointers.insert(p);
    cpu_free(p);
  }
  const auto ev = stop_recording();
  ASSERT_EQ(ev.size(), 400u);
  std::set<int64_t> ids;
  for (size_t i = 0; i < ev.size(); i += 2) {
    ASSERT_TRUE(ev[i].alloc && !ev[i + 1].alloc);
    EXPECT_EQ(ev[i].id, ev[i + 1].id);
    ids.insert(ev[i].id);
  }
  EXPECT_EQ(ids.size(), 200u);
  EXPECT_LT(pointers.size(), 200u) << "no address was reused: the test shows nothing";
  // A block of an earlier recording freed during a later one is not part of it.
  start_recording();
  void* old = cpu_allocate(64);
  stop_recording();
  start_recording();
  cpu_free(old);
  EXPECT_TRUE(stop_recording().empty());
}

TEST(TrackingAllocator, RecordsFromSeveralThreads) {
  install_tracking_allocator();
  start_recording();
  std::vector<std::thread> workers;
  for (int t = 0; t < 4; ++t)
    workers.emplace_back([t] {
      for (int i = 0; i < 100; ++i) cpu_free(cpu_allocate(static_cast<size_t>(64 * (t + 1))));
    });
  for (auto& w : workers) w.join();
  const auto ev = stop_recording();
  ASSERT_EQ(ev.size(), 800u);
  std::map<int64_t, int64_t> live;
  for (const auto& e : ev) {
    if (e.alloc) {
      EXPECT_TRUE(live.emplace(e.id, e.bytes).second);
    } else {
      ASSERT_EQ(live.count(e.id), 1u);
      EXPECT_EQ(live[e.id], e.bytes);
      live.erase(e.id);
    }
  }
  EXPECT_TRUE(live.empty());
}

using testing::model;
using testing::run;

// The embedding's tensors, all known: the token ids (the input), the lookup's output, freed once
// the forward is done, and the output's gradient, freed by the backward (the table's gradient goes
// into main_grad, a weight gradient).
TEST(Executor, RecordsTheTensorsOfALayerInOrder) {
  const int64_t s = 64, b = 2, h = 128;
  auto r = run(model("llama", h, 4, 2), s, b, Dtype::kBf16, CheckpointMode::kNone, false, false,
               graph::LayerKind::kEmbedding);
  auto m = measure_block(r);
  ASSERT_TRUE(m) << m.error().to_string();
  const auto& q = m->recorded;
  ASSERT_EQ(q.size(), 5u);
  const int64_t act = s * b * h * 2;
  EXPECT_TRUE(q[0].kind == K::kAlloc && q[0].id == 0 && q[0].bytes == s * b * 8);  // int64 token ids
  EXPECT_TRUE(q[1].kind == K::kAlloc && q[1].bytes == act);
  EXPECT_TRUE(q[2].kind == K::kFree && q[2].id == q[1].id);
  EXPECT_TRUE(m->output_freed);
  EXPECT_EQ(m->recorded_backward_begin, 3u);
  EXPECT_TRUE(q[3].kind == K::kAlloc && q[3].bytes == act);  // the output's gradient
  EXPECT_TRUE(q[4].kind == K::kFree && q[4].id == q[3].id);
  // mist's sequence for it is the same.
  auto p = predict_block(r);
  ASSERT_TRUE(p) << p.error().to_string();
  size_t pb = 0;
  const auto mist = predicted_allocation_sequence(*p, m->output_freed, &pb);
  ASSERT_EQ(mist.size(), q.size());
  EXPECT_EQ(pb, m->recorded_backward_begin);
  for (size_t i = 0; i < q.size(); ++i) {
    EXPECT_EQ(mist[i].kind, q[i].kind) << i;
    if (q[i].kind == K::kAlloc) {
      EXPECT_EQ(mist[i].bytes, q[i].bytes) << i;
    }
  }
}

// The recorded sequence holds what the measured peaks count, in the same window: its live bytes
// peak at the forward and backward peaks, and the caching allocator replaying it sees the same
// requested peak (its allocated peak adds the rounding to 512-byte blocks).
TEST(Executor, RecordedSequenceReplaysToTheMeasuredPeaks) {
  const auto E = graph::LayerKind::kEmbedding, H = graph::LayerKind::kHead;
  using CM = CheckpointMode;
  const std::vector<BlockRun> runs = {
      run(model("gpt", 128, 4, 4), 64, 2, Dtype::kFp32, CM::kNone, false, true),
      run(model("gpt", 128, 4, 4), 64, 1, Dtype::kBf16, CM::kSelective, false, true),
      run(model("llama", 128, 8, 2), 96, 1, Dtype::kFp32, CM::kSelective, true),
      run(model("falcon", 128, 4, 1), 64, 2, Dtype::kBf16, CM::kFull, true),
      run(model("falcon", 128, 4, 2), 64, 1, Dtype::kFp32, CM::kNone, true, true),
      run(model("gpt", 128, 4, 4), 64, 2, Dtype::kBf16, CM::kNone, false, true, E),
      run(model("llama", 128, 4, 2), 64, 2, Dtype::kFp32, CM::kNone, false, false, H),
  };
  for (const auto& r : runs) {
    const std::string what = std::string(r.model.family) + " " + to_string(r.checkpoint) + " layer " +
                             std::to_string(static_cast<int>(r.layer));
    auto m = measure_block(r);
    ASSERT_TRUE(m) << m.error().to_string();
    const auto& q = m->recorded;
    ASSERT_GT(q.size(), m->recorded_backward_begin) << what;
    EXPECT_EQ(q.front().kind, K::kAlloc) << what;
    EXPECT_EQ(q.front().bytes, m->input_bytes) << what;
    EXPECT_EQ(q[m->recorded_backward_begin].kind, K::kAlloc) << what;
    EXPECT_EQ(q[m->recorded_backward_begin].bytes, m->output_bytes) << what << ": the output's gradient first";
    const Walk w = walk(q);
    EXPECT_TRUE(w.consistent) << what << ": " << w.problem;
    // The forward peak over the events before the backward, the backward's from there on.
    int64_t fwd = 0;
    for (size_t i = 0; i < m->recorded_backward_begin; ++i) fwd = std::max(fwd, w.live[i]);
    EXPECT_EQ(fwd, m->forward_peak_bytes) << what;
    EXPECT_EQ(w.peak_from(m->recorded_backward_begin), m->backward_peak_bytes) << what;
    // Left at the end: the input and its gradient.
    EXPECT_EQ(w.end, m->input_bytes * (r.layer == E ? 1 : 2)) << what;
    const auto st = allocator::replay(q);
    EXPECT_EQ(st.invalid_calls, 0) << what;
    EXPECT_EQ(st.requested_bytes.peak, m->peak_bytes()) << what;
    EXPECT_GE(st.allocated_bytes.peak, m->peak_bytes()) << what;
    EXPECT_LE(st.allocated_bytes.peak, m->peak_bytes() + 512 * static_cast<int64_t>(q.size())) << what;
    std::vector<Event> forward(q.begin(), q.begin() + static_cast<std::ptrdiff_t>(m->recorded_backward_begin));
    EXPECT_EQ(allocator::replay(forward).requested_bytes.peak, m->forward_peak_bytes) << what;
    // mist's sequence is as consistent, and peaks where the memory model does without recompute.
    auto p = predict_block(r);
    ASSERT_TRUE(p) << p.error().to_string();
    const auto mist = predicted_allocation_sequence(*p, m->output_freed);
    const Walk pw = walk(mist);
    EXPECT_TRUE(pw.consistent) << what << ": " << pw.problem;
    if (r.checkpoint == CM::kNone) {
      EXPECT_EQ(pw.peak, m->peak_bytes()) << what;
    }
  }
}

// LibTorch 1.13's accumulation of two gradients (a new buffer, then both freed) rewritten as an
// in-place one; an op's backward of the same shape (its input gradient, then the frees of its
// output gradient and of a tensor saved in the forward) is left alone.
TEST(Validate, RewritesOutOfPlaceAccumulationOnly) {
  const int64_t n = 1 << 20;
  const std::vector<Event> seq = {
      {K::kAlloc, 0, 4096, 0},  // 0: the input
      {K::kAlloc, 1, n, 0},     // 1: saved by op X in the forward
      {K::kAlloc, 8, 512, 0},   // 2: saved by op Y
      {K::kAlloc, 2, n, 0},     // 3: the backward: the output's gradient
      {K::kAlloc, 3, n, 0},     // 4: X's backward: its input's gradient, then X releases its output
      {K::kFree, 2, 0, 0},      //    gradient and its saved tensor: the same shape as an
      {K::kFree, 1, 0, 0},      //    accumulation, but 1 is not the allocation before 3: kept
      {K::kAlloc, 4, n, 0},     // 7: Y's backward: a second gradient of X's input
      {K::kFree, 8, 0, 0},      //    Y releases its saved tensor
      {K::kAlloc, 6, n, 0},     // 9: the sum of both gradients, out of place
      {K::kFree, 3, 0, 0},      //    the first gradient
      {K::kFree, 4, 0, 0},      //    the second
      {K::kAlloc, 7, 512, 0},
      {K::kFree, 6, 0, 0},      //    the sum, later: becomes the first gradient's free
      {K::kFree, 7, 0, 0},
  };
  int rewritten = -1;
  const auto out = accumulate_in_place(seq, 3, &rewritten);
  EXPECT_EQ(rewritten, 1);
  ASSERT_EQ(out.size(), seq.size() - 2);
  for (size_t i = 0; i < 9; ++i) EXPECT_EQ(out[i].id, seq[i].id) << i;
  EXPECT_TRUE(out[9].kind == K::kFree && out[9].id == 4);  // the second gradient, added in place
  EXPECT_TRUE(out[10].kind == K::kAlloc && out[10].id == 7);
  EXPECT_TRUE(out[11].kind == K::kFree && out[11].id == 3);  // the sum was the first gradient
  const Walk before = walk(seq), after = walk(out);
  EXPECT_TRUE(before.consistent) << before.problem;
  EXPECT_TRUE(after.consistent) << after.problem;
  EXPECT_EQ(after.end, before.end);
  EXPECT_EQ(before.peak_from(7) - after.peak_from(7), n - 512);  // the sum held at once with both
  // Nothing is rewritten before the backward.
  EXPECT_EQ(accumulate_in_place(seq, 100, &rewritten).size(), seq.size());
  EXPECT_EQ(rewritten, 0);
}

TEST(Validate, ReservedTermsOfAQuickCase) {
  ValidationOptions o;
  o.quick = true;
  o.timing_reps = 1;
  o.only = validation_sweep(true).at(0).name;
  auto r = run_validation(o);
  ASSERT_TRUE(r) << r.error().to_string();
  ASSERT_EQ(r->cases.size(), 1u);
  const auto& c = r->cases[0];
  std::map<std::string, TermCheck> terms;
  for (const auto& t : c.terms) terms[t.term] = t;
  for (const char* name : {"reserved", "reserved_expandable", "allocated_replay"}) {
    ASSERT_EQ(terms.count(name), 1u) << name;
    EXPECT_GT(terms[name].measured, 0) << name;
    EXPECT_GT(terms[name].predicted, 0) << name;
  }
  EXPECT_GT(terms["reserved"].bound, 0);
  EXPECT_TRUE(terms["reserved"].ok);
  // Reserved memory is whole segments (2 MiB at least), above what is allocated.
  EXPECT_EQ(static_cast<int64_t>(terms["reserved"].measured) % (2 << 20), 0);
  EXPECT_GE(terms["reserved"].measured, terms["allocated_replay"].measured);
  EXPECT_GE(terms["allocated_replay"].measured, static_cast<double>(c.measured.peak_bytes()));
  EXPECT_EQ(c.terms.back().term, "block_time");
  bool summarized = false;
  for (const auto& s : r->summary) summarized = summarized || (s.term == "reserved" && s.cases == 1);
  EXPECT_TRUE(summarized);
}

}  // namespace
}  // namespace mist::executor
