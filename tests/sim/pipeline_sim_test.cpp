#include "sim/pipeline_sim.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "analysis/time_model.hpp"

namespace mist::sim {
namespace {

SimResult run(const PipelineJob& job) {
  auto r = simulate(job);
  EXPECT_TRUE(r.has_value()) << (r ? "" : r.error().to_string());
  return r ? *r : SimResult{};
}

PipelineJob uniform(int pp, int64_t G, int64_t v, double fwd, double bwd) {
  PipelineJob job;
  job.stages.assign(static_cast<size_t>(pp), StageWork{.fwd = fwd, .bwd = bwd});
  job.micro_batches = G;
  job.virtual_stages = v;
  return job;
}

std::vector<double> stable_times(const PipelineJob& job) {
  std::vector<double> T;
  for (const auto& s : job.stages) T.push_back(s.fwd + s.bwd);
  return T;
}

TEST(Schedule, EveryChunkRunsOnceForwardBeforeBackward) {
  for (int pp : {1, 2, 3, 4, 8})
    for (int64_t v : {1, 2, 3})
      for (int64_t G : {int64_t{pp}, 2 * int64_t{pp}, 5 * int64_t{pp}})
        for (int i = 0; i < pp; ++i) {
          std::set<std::tuple<bool, int64_t, int64_t>> seen, fwd_done;
          for (const auto& s : stage_schedule(pp, i, G, v)) {
            ASSERT_TRUE(seen.insert({s.forward, s.micro_batch, s.chunk}).second);
            ASSERT_LT(s.micro_batch, G);
            ASSERT_LT(s.chunk, v);
            if (s.forward) fwd_done.insert({true, s.micro_batch, s.chunk});
            else ASSERT_TRUE(fwd_done.count({true, s.micro_batch, s.chunk}));
          }
          EXPECT_EQ(seen.size(), static_cast<size_t>(2 * G * v));
        }
}

TEST(Schedule, OneFOneBWarmUp) {
  // pp = 4, G = 6, stage 1: two warm-up forwards, then F B alternating, then the cool-down.
  std::string s;
  for (const auto& st : stage_schedule(4, 1, 6, 1)) s += (st.forward ? "F" : "B") + std::to_string(st.micro_batch) + " ";
  EXPECT_EQ(s, "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 B4 B5 ");
}

TEST(Schedule, InterleavedOrderIsMegatrons) {
  // pp = 2, v = 2, G = 4 on stage 0: warm-up (2 - 0 - 1)·2 + (2 - 1)·2 = 4 chunk-forwards.
  std::string s;
  for (const auto& st : stage_schedule(2, 0, 4, 2))
    s += (st.forward ? "F" : "B") + std::to_string(st.micro_batch) + "." + std::to_string(st.chunk) + " ";
  EXPECT_EQ(s, "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0 ");
}

double closed_form(const PipelineJob& job) {
  const auto T = stable_times(job);
  return analysis::pipeline_iteration_time(T, std::vector<double>(T.size(), 0.0), {}, job.micro_batches,
                                           job.virtual_stages);
}

// Random 1F1B jobs (no deltas, no p2p) of the shapes for which Mist's closed form
// Σ T_i + (G - 1)·max T_i is the exact makespan: all stages equally long (any forward/backward
// split), or the slowest stage last (any others). For other shapes it is not exact (next tests).
TEST(PipelineSim, ZeroDeltaEqualsClosedFormExactly) {
  std::mt19937_64 rng(20261130);
  std::uniform_real_distribution<double> u(0.05, 2.0), frac(0.0, 1.0);
  std::uniform_int_distribution<int> coin(0, 5);
  int cases = 0;
  for (int pp = 1; pp <= 8; ++pp)
    for (int64_t G = 1; G <= 64; ++G)
      for (int shape = 0; shape < 4; ++shape) {
        PipelineJob job;
        job.micro_batches = G;
        const double T = u(rng);
        for (int i = 0; i < pp; ++i) {
          if (shape == 0) {  // equal T_i, random split; some stages forward-only or backward-only
            const int c = coin(rng);
            const double f = c == 0 ? T : c == 1 ? 0.0 : frac(rng) * T;
            job.stages.push_back({.fwd = f, .bwd = T - f});
          } else {  // random stages, some forward-only or backward-only
            const int c = coin(rng);
            job.stages.push_back({.fwd = c == 0 ? 0.0 : u(rng), .bwd = c == 1 ? 0.0 : u(rng)});
          }
        }
        auto longer = [](const StageWork& a, const StageWork& b) { return a.fwd + a.bwd < b.fwd + b.bwd; };
        if (shape == 1) std::swap(*std::max_element(job.stages.begin(), job.stages.end(), longer), job.stages.back());
        if (shape == 2) std::sort(job.stages.begin(), job.stages.end(), longer);
        if (shape == 3) job.micro_batches = 1;  // one micro-batch: Σ T_i whatever the stages
        const auto r = run(job);
        const double closed = closed_form(job);
        ASSERT_NEAR(r.makespan, closed, 1e-9 * closed) << "pp " << pp << " G " << G << " shape " << shape;
        ++cases;
      }
  EXPECT_EQ(cases, 8 * 64 * 4);
}

// The closed form over-estimates when the slowest stage k is not last and its warm-up forwards
// hide the first micro-batch's round trip through the stages after it: here stage 0 (T = 20)
// runs F0 F1 B0 B1 without a gap while stage 1 (T = 2) turns F0 around, so the iteration is
// 2·T_0 = 40, not T_0 + T_1 + T_0 = 42.
TEST(PipelineSim, ClosedFormOverEstimatesHiddenRoundTrip) {
  PipelineJob job;
  job.micro_batches = 2;
  job.stages = {{.fwd = 10, .bwd = 10}, {.fwd = 1, .bwd = 1}};
  EXPECT_DOUBLE_EQ(run(job).makespan, 40);
  EXPECT_DOUBLE_EQ(closed_form(job), 42);
}

// ... and under-estimates when the stage before the slowest one forwards more slowly than the
// slowest: stage 1 (T = 4) must run F1 before B0 (1F1B order) and waits for it until stage 0
// (f = 3) has sent it at 6; the critical path F0 F1 (stage 0), F1 B0 B1 (stage 1) is 13, not 11.
TEST(PipelineSim, ClosedFormUnderEstimatesStarvedWarmUp) {
  PipelineJob job;
  job.micro_batches = 2;
  job.stages = {{.fwd = 3, .bwd = 0}, {.fwd = 1, .bwd = 3}, {.fwd = 0, .bwd = 0}};
  EXPECT_DOUBLE_EQ(run(job).makespan, 13);
  EXPECT_DOUBLE_EQ(closed_form(job), 11);
}

TEST(PipelineSim, InterleavedUniformStagesHaveTheShorterBubble) {
  for (int pp = 2; pp <= 8; ++pp)
    for (int64_t v = 2; v <= 4; ++v)
      for (int64_t k = 1; k <= 4; ++k)
        for (auto [f, b] : {std::pair{1.0, 2.0}, std::pair{1.0, 1.0}, std::pair{0.7, 0.3}}) {
          const int64_t G = k * pp;
          const auto r = run(uniform(pp, G, v, f, b));
          const double T = f + b;
          const double expect = (static_cast<double>(G) + (pp - 1.0) / static_cast<double>(v)) * T;
          EXPECT_NEAR(r.makespan, expect, 1e-9 * expect) << "pp " << pp << " v " << v << " G " << G << " f " << f;
          const double closed = analysis::pipeline_iteration_time(stable_times(uniform(pp, G, v, f, b)),
                                                                   std::vector<double>(static_cast<size_t>(pp), 0.0), {}, G, v);
          EXPECT_NEAR(r.makespan, closed, 1e-9 * expect);
        }
}

TEST(PipelineSim, ActivationPeaksFollowOneFOneB) {
  for (int pp : {1, 2, 4, 8})
    for (int64_t G : {1, 2, 3, 4, 8, 16, 32}) {
      auto job = uniform(pp, G, 1, 1.0, 2.0);
      for (auto& s : job.stages) s.base_bytes = 100, s.activation_bytes_per_micro_batch = 10;
      const auto r = run(job);
      for (int i = 0; i < pp; ++i)
        EXPECT_DOUBLE_EQ(r.peak_bytes[static_cast<size_t>(i)],
                         100 + 10 * static_cast<double>(std::min<int64_t>(pp - i, G)))
            << "pp " << pp << " G " << G << " stage " << i;
      EXPECT_DOUBLE_EQ(r.peak_bytes[0], 100 + 10 * static_cast<double>(std::min<int64_t>(pp, G)));
      // Everything is freed by the end, and samples are in time order.
      for (int i = 0; i < pp; ++i) {
        double last = -1;
        for (const auto& m : r.memory)
          if (m.stage == i) last = m.bytes;
        EXPECT_DOUBLE_EQ(last, 100);
      }
      EXPECT_TRUE(std::is_sorted(r.memory.begin(), r.memory.end(),
                                 [](const MemorySample& a, const MemorySample& b) { return a.time < b.time; }));
    }
}

TEST(PipelineSim, InterleavedPeaksMatchMegatronWarmUp) {
  // Megatron holds warm-up + 1 chunks at its peak, each 1/v of the stage's activations.
  for (int pp : {2, 4})
    for (int64_t v : {2, 4})
      for (int64_t G : {int64_t{pp}, 4 * int64_t{pp}}) {
        auto job = uniform(pp, G, v, 1.0, 2.0);
        for (auto& s : job.stages) s.activation_bytes_per_micro_batch = 8;
        const auto r = run(job);
        for (int i = 0; i < pp; ++i) {
          const double chunks = std::min<double>((pp - i - 1) * 2 + (v - 1) * pp + 1, G * v);
          EXPECT_DOUBLE_EQ(r.peak_bytes[static_cast<size_t>(i)], 8 * chunks / static_cast<double>(v))
              << "pp " << pp << " v " << v << " G " << G << " stage " << i;
        }
      }
}

TEST(PipelineSim, P2pAndExtrasSitOnTheCollectiveStream) {
  // pp = 2, G = 1: F0 → send → F1 → B1 → send → B0, then stage 0's gradient sync.
  PipelineJob job;
  job.stages = {{.fwd = 1, .bwd = 2, .first_fwd_extra = 0.5, .last_bwd_extra = 3, .p2p_fwd = 0.25, .p2p_bwd = 0.125},
                {.fwd = 1, .bwd = 2, .p2p_fwd = 0.25, .p2p_bwd = 0.125}};
  const auto r = run(job);
  EXPECT_DOUBLE_EQ(r.makespan, 0.5 + 1 + 0.25 + 1 + 2 + 0.125 + 2 + 3);
  int collective = 0;
  for (const auto& e : r.events)
    if (e.stream == Stream::kCollective) ++collective;
  EXPECT_EQ(collective, 4);  // param gather, send F0, send B0 (stage 1), grad sync
  EXPECT_DOUBLE_EQ(r.compute_busy[0], 3);
  EXPECT_DOUBLE_EQ(r.collective_busy[0], 0.5 + 0.25 + 3);
}

TEST(PipelineSim, CopiesOverlapComputeAndDelayOnlyWhenLonger) {
  PipelineJob job;
  job.micro_batches = 2;
  job.stages = {{.fwd = 1, .bwd = 1, .fwd_h2d = 0.5, .bwd_d2h = 0.5}};
  EXPECT_DOUBLE_EQ(run(job).makespan, 4);
  job.stages[0].fwd_h2d = 3;  // F0 0..1, its copy 0..3: F1 waits
  EXPECT_DOUBLE_EQ(run(job).makespan, 3 + 1 + 1 + 1 + 2);  // F1 3..4 (+copy to 7), B0 7..8, B1 8..9
}

struct ErrorStats {
  std::vector<double> err;  // (closed - sim) / sim
  void print(const char* what) {
    std::sort(err.begin(), err.end());
    auto q = [&](double p) { return 100 * err[static_cast<size_t>(p * static_cast<double>(err.size() - 1))]; };
    size_t exact = 0;
    for (double e : err) exact += std::abs(e) <= 1e-9;
    std::printf("%-44s n %zu exact %5.1f%%  min %+6.2f%% p5 %+6.2f%% median %+6.2f%% p95 %+6.2f%% max %+6.2f%%\n",
                what, err.size(), 100.0 * static_cast<double>(exact) / static_cast<double>(err.size()), q(0), q(0.05),
                q(0.5), q(0.95), q(1));
  }
};

// Random 1F1B jobs, pp 1..8, G 1..64, forward/backward 0.1..1 each, deltas up to 50% of T_i split
// at random between the first forward and the last backward. Prints the closed form's error; checks
// only what must hold.
TEST(PipelineSim, ClosedFormErrorWithDeltas) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(0.1, 1.0), frac(0.0, 1.0);
  ErrorStats zero, any, exact_shape, drain_offsets, mist_offsets;
  for (int trial = 0; trial < 2000; ++trial) {
    const int pp = 1 + static_cast<int>(rng() % 8);
    const int64_t G = 1 + static_cast<int64_t>(rng() % 64);
    const bool slowest_last = trial % 2 == 1;
    PipelineJob job;
    job.micro_batches = G;
    for (int i = 0; i < pp; ++i) job.stages.push_back({.fwd = u(rng), .bwd = u(rng)});
    if (slowest_last)
      std::swap(*std::max_element(job.stages.begin(), job.stages.end(),
                                  [](const auto& a, const auto& b) { return a.fwd + a.bwd < b.fwd + b.bwd; }),
                job.stages.back());
    const double sim0 = run(job).makespan;
    if (!slowest_last) zero.err.push_back(closed_form(job) / sim0 - 1);
    std::vector<double> T, D, B;
    double sum_d = 0;
    for (auto& w : job.stages) {
      const double d = 0.5 * frac(rng) * (w.fwd + w.bwd), split = frac(rng);
      w.first_fwd_extra = split * d;
      w.last_bwd_extra = d - w.first_fwd_extra;
      T.push_back(w.fwd + w.bwd);
      D.push_back(d);
      B.push_back(w.bwd);
      sum_d += d;
    }
    const double sim = run(job).makespan;
    // Invariants: extras delay by at most their sum; the first micro-batch's round trip, and every
    // stage's own work behind its extras and the forwards before it, are lower bounds; stage 0
    // finishes last, so its last extra is always exposed.
    ASSERT_GE(sim, sim0 * (1 - 1e-12));
    ASSERT_LE(sim, (sim0 + sum_d) * (1 + 1e-12));
    ASSERT_GE(sim, sim0 + job.stages[0].last_bwd_extra - 1e-9);
    double sum_t = 0, before_f = 0, before_b = 0;
    for (const auto& w : job.stages) {
      const double own = std::max(w.first_fwd_extra, before_f) + static_cast<double>(G) * (w.fwd + w.bwd) +
                         std::max(w.last_bwd_extra, before_b);
      ASSERT_GE(sim, own * (1 - 1e-12));
      before_f += w.fwd, before_b += w.bwd, sum_t += w.fwd + w.bwd;
    }
    ASSERT_GE(sim, sum_t * (1 - 1e-12));
    const double closed = analysis::pipeline_iteration_time(T, D, B, G);
    (slowest_last ? exact_shape : any).err.push_back(closed / sim - 1);
    drain_offsets.err.push_back(closed / sim - 1);
    mist_offsets.err.push_back(analysis::pipeline_iteration_time(T, D, T, G) / sim - 1);  // Σ_{j<i} T_j
  }
  // Interleaved 1F1B, no deltas: the closed form's fill max T + (Σ T - max T)/v.
  ErrorStats interleaved;
  for (int trial = 0; trial < 1000; ++trial) {
    const int pp = 2 + static_cast<int>(rng() % 7);
    PipelineJob job;
    job.virtual_stages = 2 + static_cast<int64_t>(rng() % 3);
    job.micro_batches = pp * (1 + static_cast<int64_t>(rng() % 8));
    for (int i = 0; i < pp; ++i) job.stages.push_back({.fwd = u(rng), .bwd = u(rng)});
    const double sim = run(job).makespan;
    ASSERT_GE(sim, (stable_times(job)[0] * static_cast<double>(job.micro_batches)) * (1 - 1e-12));
    interleaved.err.push_back(closed_form(job) / sim - 1);
  }
  zero.print("no deltas, random stages");
  interleaved.print("no deltas, random stages, interleaved");
  any.print("deltas, random stages");
  exact_shape.print("deltas, slowest stage last");
  drain_offsets.print("deltas, all, offsets sum B_j / v");
  mist_offsets.print("deltas, all, Mist's offsets sum T_j");
}

// Equal stages, one extra after the last backward of one stage: the stage's last backward ends
// Σ_{j<i} bwd_j / v before the iteration does (the last gradient still crosses the earlier stages,
// one chunk each), so the closed form with those drain offsets is the simulation's makespan, 1F1B
// and interleaved alike. Mist's Σ_{j<i} T_j offsets hide too much of the extra.
TEST(PipelineSim, DrainOffsetsAreExactForOneTrailingExtra) {
  int mist_off = 0, cases = 0;
  for (int pp = 2; pp <= 6; ++pp)
    for (int64_t v : {1, 2, 4})
      for (int64_t k : {1, 3})
        for (int at = 0; at < pp; ++at)
          for (double extra : {0.5, 2.0, 7.0}) {
            const int64_t G = k * pp;
            auto job = uniform(pp, G, v, 1.0, 2.0);
            job.stages[static_cast<size_t>(at)].last_bwd_extra = extra;
            const double sim = run(job).makespan;
            const auto T = stable_times(job);
            std::vector<double> D(T.size(), 0.0), B(T.size(), 2.0);
            D[static_cast<size_t>(at)] = extra;
            const double closed = analysis::pipeline_iteration_time(T, D, B, G, v);
            EXPECT_NEAR(closed, sim, 1e-9 * sim) << "pp " << pp << " v " << v << " G " << G << " at " << at;
            mist_off += analysis::pipeline_iteration_time(T, D, T, G, v) < sim - 1e-9;
            ++cases;
          }
  EXPECT_GT(mist_off, cases / 4);  // the old offsets under-count in many of these cases
}

TEST(PipelineSim, RejectsInvalidJobs) {
  EXPECT_FALSE(simulate(PipelineJob{}).has_value());
  auto job = uniform(4, 6, 2, 1, 1);
  auto r = simulate(job);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().path, "job.micro_batches");
  job = uniform(2, 4, 1, 1, -1);
  EXPECT_FALSE(simulate(job).has_value());
}

TEST(ChromeTrace, FollowsTheTraceEventFormat) {
  auto job = uniform(2, 4, 2, 1e-3, 2e-3);
  for (auto& s : job.stages) s.p2p_fwd = s.p2p_bwd = 1e-4, s.activation_bytes_per_micro_batch = 1e9;
  job.stages[0].last_bwd_extra = 5e-3;
  job.stages[0].last_bwd_extra_name = "gradient_sync";
  const auto r = run(job);
  const Json t = chrome_trace(r);
  ASSERT_TRUE(t.contains("traceEvents"));
  ASSERT_TRUE(t["traceEvents"].is_array());
  std::set<std::pair<int, std::string>> processes, threads;
  size_t complete = 0, counters = 0;
  for (const auto& e : t["traceEvents"]) {
    const std::string ph = e.at("ph");
    ASSERT_TRUE(e.at("pid").is_number_integer());
    EXPECT_GE(e.at("pid").get<int>(), 1);
    if (ph == "M") {
      if (e.at("name") == "process_name") processes.insert({e["pid"].get<int>(), e["args"]["name"].get<std::string>()});
      if (e.at("name") == "thread_name") threads.insert({e["tid"].get<int>(), e["args"]["name"].get<std::string>()});
    } else if (ph == "X") {
      ++complete;
      EXPECT_TRUE(e.at("name").is_string());
      EXPECT_TRUE(e.at("tid").is_number_integer());
      EXPECT_GE(e.at("ts").get<double>(), 0);
      EXPECT_GE(e.at("dur").get<double>(), 0);
      EXPECT_LE(e["ts"].get<double>() + e["dur"].get<double>(), r.makespan * 1e6 * (1 + 1e-12));
    } else if (ph == "C") {
      ++counters;
      EXPECT_TRUE(e.at("args").at("bytes").is_number());
    } else {
      ADD_FAILURE() << "unexpected phase " << ph;
    }
  }
  EXPECT_EQ(processes, (std::set<std::pair<int, std::string>>{{1, "stage 0"}, {2, "stage 1"}}));
  EXPECT_EQ(threads, (std::set<std::pair<int, std::string>>{{1, "compute"}, {2, "collective"}, {3, "h2d"}, {4, "d2h"}}));
  EXPECT_EQ(complete, r.events.size());
  // Complete events on one thread must nest; ours follow one another (whole nanoseconds).
  std::map<std::pair<int, int>, std::vector<std::pair<int64_t, int64_t>>> slices;
  for (const auto& e : t["traceEvents"])
    if (e["ph"] == "X")
      slices[{e["pid"].get<int>(), e["tid"].get<int>()}].push_back(
          {std::llround(e["ts"].get<double>() * 1000), std::llround(e["dur"].get<double>() * 1000)});
  for (auto& [thread, v] : slices) {
    std::sort(v.begin(), v.end());
    for (size_t k = 1; k < v.size(); ++k) EXPECT_GE(v[k].first, v[k - 1].first + v[k - 1].second);
  }
  EXPECT_EQ(counters, r.memory.size());
  // Stage 0's last event is the gradient sync, 5 ms long.
  EXPECT_NE(t.dump().find("\"gradient_sync\""), std::string::npos);
}

}  // namespace
}  // namespace mist::sim
