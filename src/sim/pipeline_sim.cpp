#include "sim/pipeline_sim.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <queue>
#include <tuple>

#include <fmt/format.h>

namespace mist::sim {

const char* stream_name(Stream s) {
  switch (s) {
    case Stream::kCompute: return "compute";
    case Stream::kCollective: return "collective";
    case Stream::kHostToDevice: return "h2d";
    case Stream::kDeviceToHost: return "d2h";
  }
  return "?";
}

std::vector<ScheduleStep> stage_schedule(int pp, int stage, int64_t G, int64_t v) {
  std::vector<ScheduleStep> order;
  const int64_t P = pp, i = stage;
  if (v <= 1) {
    // forward_backward_pipelining_without_interleaving: pp - i - 1 warm-up forwards, then one
    // forward and one backward at a time, then the remaining backwards.
    const int64_t warm = std::min(P - i - 1, G), steady = G - warm;
    for (int64_t k = 0; k < warm; ++k) order.push_back({true, k, 0});
    for (int64_t k = 0; k < steady; ++k) {
      order.push_back({true, warm + k, 0});
      order.push_back({false, k, 0});
    }
    for (int64_t k = steady; k < G; ++k) order.push_back({false, k, 0});
    return order;
  }
  // forward_backward_pipelining_with_interleaving: the k-th chunk-forward runs chunk
  // (k mod pp·v) / pp on micro-batch (k / pp·v)·pp + k mod pp; backwards walk the chunks in
  // reverse. Warm-up: (pp - i - 1)·2 + (v - 1)·pp chunk-forwards (all of them if fewer).
  const int64_t total = G * v, group = P * v;
  const int64_t warm = std::min((P - i - 1) * 2 + (v - 1) * P, total), steady = total - warm;
  auto step = [&](int64_t k, bool fwd) {
    const int64_t c = (k % group) / P;
    return ScheduleStep{fwd, (k / group) * P + k % P, fwd ? c : v - 1 - c};
  };
  for (int64_t k = 0; k < warm; ++k) order.push_back(step(k, true));
  for (int64_t k = 0; k < steady; ++k) {
    order.push_back(step(warm + k, true));
    order.push_back(step(k, false));
  }
  for (int64_t k = steady; k < total; ++k) order.push_back(step(k, false));
  return order;
}

namespace {

struct Dep {
  int task;
  bool on_start;  // wait for the task's start (a copy issued with a compute task), not its end
};

struct Task {
  int stage = 0;
  Stream stream = Stream::kCompute;
  std::string name;
  double dur = 0;
  double mem_delta = 0;  // applied to the stage's memory when the task ends
  std::vector<Dep> deps;
  std::vector<int> dependents;
  int pending = 0;
  double ready = 0, start = -1, end = -1;
};

class Builder {
 public:
  explicit Builder(std::vector<Task>& t) : tasks_(t) {}
  int add(int stage, Stream s, std::string name, double dur, double mem = 0) {
    tasks_.push_back(Task{stage, s, std::move(name), dur, mem, {}, {}, 0, 0, -1, -1});
    return static_cast<int>(tasks_.size()) - 1;
  }
  void dep(int task, int on, bool on_start = false) {
    if (task < 0 || on < 0) return;
    tasks_[static_cast<size_t>(task)].deps.push_back({on, on_start});
  }

 private:
  std::vector<Task>& tasks_;
};

Result<void> check_job(const PipelineJob& job) {
  if (job.stages.empty()) return fail("job.stages", "needs at least one stage");
  if (job.micro_batches < 1) return fail("job.micro_batches", "must be at least 1");
  if (job.virtual_stages < 1) return fail("job.virtual_stages", "must be at least 1");
  const auto pp = static_cast<int64_t>(job.stages.size());
  if (job.virtual_stages > 1 && job.micro_batches % pp != 0)
    return fail("job.micro_batches", fmt::format("the interleaved schedule needs a multiple of pp ({}), got {}",
                                                 pp, job.micro_batches));
  for (size_t i = 0; i < job.stages.size(); ++i) {
    const auto& s = job.stages[i];
    for (double x : {s.fwd, s.bwd, s.first_fwd_extra, s.last_bwd_extra, s.p2p_fwd, s.p2p_bwd, s.fwd_h2d,
                     s.fwd_d2h, s.bwd_h2d, s.bwd_d2h, s.base_bytes, s.activation_bytes_per_micro_batch})
      if (!std::isfinite(x) || x < 0)
        return fail(fmt::format("job.stages[{}]", i), "times and bytes must be finite and non-negative");
    if (!s.chunk_share.empty()) {
      double sum = 0;
      for (double x : s.chunk_share) sum += std::isfinite(x) && x >= 0 ? x : -1e300;
      if (static_cast<int64_t>(s.chunk_share.size()) != job.virtual_stages || !(std::abs(sum - 1) < 1e-9))
        return fail(fmt::format("job.stages[{}].chunk_share", i),
                    "needs one non-negative share per chunk, adding up to 1");
    }
  }
  return {};
}

// The share of a stage's per-micro-batch work that chunk `c` does.
double chunk_share(const StageWork& w, int64_t c, double v) {
  return w.chunk_share.empty() ? 1 / v : w.chunk_share[static_cast<size_t>(c)];
}

}  // namespace

Result<SimResult> simulate(const PipelineJob& job) {
  MIST_CHECK(check_job(job));
  const int pp = static_cast<int>(job.stages.size());
  const int64_t G = job.micro_batches, v = job.virtual_stages;
  const double vd = static_cast<double>(v);
  std::vector<Task> tasks;
  Builder b(tasks);

  // Compute tasks, indexed [stage][chunk][micro-batch].
  auto idx = [&](int i, int64_t c, int64_t mb) { return (static_cast<size_t>(i) * v + c) * G + mb; };
  std::vector<int> fwd(static_cast<size_t>(pp) * v * G), bwd(fwd.size());
  std::vector<std::vector<int>> program(static_cast<size_t>(pp));
  std::vector<int64_t> chunk_of;  // per compute task, in creation order (tasks[t] for t < its size)
  for (int i = 0; i < pp; ++i) {
    const auto& w = job.stages[static_cast<size_t>(i)];
    for (const auto& s : stage_schedule(pp, i, G, v)) {
      const std::string name = fmt::format("{}{}{}", s.forward ? 'F' : 'B', s.micro_batch,
                                           v > 1 ? fmt::format(".c{}", s.chunk) : "");
      const double share = chunk_share(w, s.chunk, vd);
      const double act = w.activation_bytes_per_micro_batch * share;
      const int t = s.forward ? b.add(i, Stream::kCompute, name, w.fwd * share, act)
                              : b.add(i, Stream::kCompute, name, w.bwd * share, -act);
      chunk_of.push_back(s.chunk);
      (s.forward ? fwd : bwd)[idx(i, s.chunk, s.micro_batch)] = t;
      program[static_cast<size_t>(i)].push_back(t);
    }
  }
  // Pipeline dependencies through p2p sends on the sender's collective stream. Virtual stage
  // c·pp + i follows c·pp + i - 1: stage i - 1 of the same chunk, or the last stage of chunk c - 1.
  for (int i = 0; i < pp; ++i) {
    const auto& w = job.stages[static_cast<size_t>(i)];
    for (int64_t c = 0; c < v; ++c) {
      for (int64_t mb = 0; mb < G; ++mb) {
        const int f = fwd[idx(i, c, mb)], bk = bwd[idx(i, c, mb)];
        b.dep(bk, f);
        const bool has_next = i + 1 < pp || c + 1 < v;
        if (has_next) {
          const int next = fwd[idx((i + 1) % pp, i + 1 < pp ? c : c + 1, mb)];
          int from = f;
          if (w.p2p_fwd > 0) {
            from = b.add(i, Stream::kCollective, "send " + tasks[static_cast<size_t>(f)].name, w.p2p_fwd);
            b.dep(from, f);
          }
          b.dep(next, from);
        }
        const bool has_prev = i > 0 || c > 0;
        if (has_prev) {
          const int prev = bwd[idx((i + pp - 1) % pp, i > 0 ? c : c - 1, mb)];
          int from = bk;
          if (w.p2p_bwd > 0) {
            from = b.add(i, Stream::kCollective, "send " + tasks[static_cast<size_t>(bk)].name, w.p2p_bwd);
            b.dep(from, bk);
          }
          b.dep(prev, from);
        }
      }
    }
  }
  // Once per iteration: the extra before the first forward and after the last backward, and the
  // offload copies issued with each compute task.
  for (int i = 0; i < pp; ++i) {
    const auto& w = job.stages[static_cast<size_t>(i)];
    const auto& prog = program[static_cast<size_t>(i)];
    if (w.first_fwd_extra > 0) {
      const int e = b.add(i, Stream::kCollective, w.first_fwd_extra_name, w.first_fwd_extra);
      b.dep(prog.front(), e);
    }
    if (w.last_bwd_extra > 0) {
      const int e = b.add(i, Stream::kCollective, w.last_bwd_extra_name, w.last_bwd_extra);
      b.dep(e, prog.back());
    }
    for (size_t k = 0; k < prog.size(); ++k) {
      const int t = prog[k];
      const bool is_fwd = tasks[static_cast<size_t>(t)].name[0] == 'F';
      const std::string tname = tasks[static_cast<size_t>(t)].name;
      for (auto [s, d] : {std::pair{Stream::kHostToDevice, is_fwd ? w.fwd_h2d : w.bwd_h2d},
                          std::pair{Stream::kDeviceToHost, is_fwd ? w.fwd_d2h : w.bwd_d2h}}) {
        if (d <= 0) continue;
        const int cp = b.add(i, s, (s == Stream::kHostToDevice ? "h2d " : "d2h ") + tname,
                             d * chunk_share(w, chunk_of[static_cast<size_t>(t)], vd));
        b.dep(cp, t, /*on_start=*/true);
        if (k + 1 < prog.size()) b.dep(prog[k + 1], cp);
      }
    }
  }

  // Event loop. Each (stage, stream) is a resource; the compute stream runs its program in order,
  // the others run their enabled tasks first come, first served (ready time, then creation).
  for (size_t t = 0; t < tasks.size(); ++t) {
    auto& deps = tasks[t].deps;
    std::sort(deps.begin(), deps.end(), [](const Dep& a, const Dep& c) { return a.task < c.task; });
    deps.erase(std::unique(deps.begin(), deps.end(), [](const Dep& a, const Dep& c) { return a.task == c.task; }),
               deps.end());
    tasks[t].pending = static_cast<int>(deps.size());
    for (const auto& d : deps) tasks[static_cast<size_t>(d.task)].dependents.push_back(static_cast<int>(t));
  }
  using Key = std::pair<double, int>;
  const size_t n_res = static_cast<size_t>(pp) * kNumStreams;
  std::vector<double> free_at(n_res, 0);
  std::vector<size_t> next_in_program(static_cast<size_t>(pp), 0);
  std::vector<std::priority_queue<Key, std::vector<Key>, std::greater<>>> queue(n_res);
  auto res = [](const Task& t) { return static_cast<size_t>(t.stage) * kNumStreams + static_cast<size_t>(t.stream); };
  for (size_t t = 0; t < tasks.size(); ++t)
    if (tasks[t].pending == 0 && tasks[t].stream != Stream::kCompute) queue[res(tasks[t])].push({0.0, static_cast<int>(t)});
  // The start and end of `t` are now known: resolve it in each dependent.
  auto release = [&](int t) {
    const auto& src = tasks[static_cast<size_t>(t)];
    for (int d : src.dependents) {
      auto& dt = tasks[static_cast<size_t>(d)];
      for (const auto& dep : dt.deps)
        if (dep.task == t) dt.ready = std::max(dt.ready, dep.on_start ? src.start : src.end);
      if (--dt.pending == 0 && dt.stream != Stream::kCompute) queue[res(dt)].push({dt.ready, d});
    }
  };

  std::vector<int> started;  // in start order
  started.reserve(tasks.size());
  constexpr double kInf = std::numeric_limits<double>::infinity();
  while (started.size() < tasks.size()) {
    double best = kInf;
    int pick = -1;
    for (size_t r = 0; r < n_res; ++r) {
      int cand = -1;
      if (r % kNumStreams == static_cast<size_t>(Stream::kCompute)) {
        const auto& prog = program[r / kNumStreams];
        const size_t k = next_in_program[r / kNumStreams];
        if (k < prog.size() && tasks[static_cast<size_t>(prog[k])].pending == 0) cand = prog[k];
      } else if (!queue[r].empty()) {
        cand = queue[r].top().second;
      }
      if (cand < 0) continue;
      const double s = std::max(free_at[r], tasks[static_cast<size_t>(cand)].ready);
      if (s < best) best = s, pick = cand;
    }
    if (pick < 0) return fail("", "pipeline simulation deadlocked (inconsistent schedule)");
    auto& t = tasks[static_cast<size_t>(pick)];
    const size_t r = res(t);
    if (t.stream == Stream::kCompute)
      ++next_in_program[static_cast<size_t>(t.stage)];
    else
      queue[r].pop();
    t.start = best;
    t.end = best + t.dur;
    free_at[r] = t.end;
    started.push_back(pick);
    release(pick);
  }

  SimResult out;
  out.peak_bytes.assign(static_cast<size_t>(pp), 0);
  out.compute_busy.assign(static_cast<size_t>(pp), 0);
  out.collective_busy.assign(static_cast<size_t>(pp), 0);
  for (int id : started) {
    const auto& t = tasks[static_cast<size_t>(id)];
    out.makespan = std::max(out.makespan, t.end);
    out.events.push_back({t.stage, t.stream, t.name, t.start, t.end});
    if (t.stream == Stream::kCompute) out.compute_busy[static_cast<size_t>(t.stage)] += t.dur;
    if (t.stream == Stream::kCollective) out.collective_busy[static_cast<size_t>(t.stage)] += t.dur;
  }
  // Memory changes when compute tasks end; the compute stream is in order, so its program gives
  // the order of changes (also among tasks of zero duration).
  for (int i = 0; i < pp; ++i) {
    const auto& w = job.stages[static_cast<size_t>(i)];
    double bytes = w.base_bytes, peak = bytes;
    out.memory.push_back({i, 0.0, bytes});
    for (int id : program[static_cast<size_t>(i)]) {
      const auto& t = tasks[static_cast<size_t>(id)];
      bytes += t.mem_delta;
      if (std::abs(bytes - w.base_bytes) < 1e-9 * std::max(1.0, w.activation_bytes_per_micro_batch))
        bytes = w.base_bytes;  // no drift after the last backward
      peak = std::max(peak, bytes);
      out.memory.push_back({i, t.end, bytes});
    }
    out.peak_bytes[static_cast<size_t>(i)] = peak;
  }
  std::stable_sort(out.memory.begin(), out.memory.end(),
                   [](const MemorySample& a, const MemorySample& c) { return a.time < c.time; });
  return out;
}

Json chrome_trace(const SimResult& r) {
  // Trace Event Format: "M" metadata names processes and threads, "X" complete events carry
  // ts and dur, "C" counters draw a track per process. pids and tids start at 1 (0 is special
  // to some viewers).
  Json ev = Json::array();
  const int pp = static_cast<int>(r.peak_bytes.size());
  for (int i = 0; i < pp; ++i) {
    ev.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", i + 1}, {"tid", 0},
                  {"args", {{"name", fmt::format("stage {}", i)}}}});
    ev.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", i + 1}, {"tid", 0},
                  {"args", {{"sort_index", i}}}});
    for (int s = 0; s < kNumStreams; ++s) {
      ev.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", i + 1}, {"tid", s + 1},
                    {"args", {{"name", stream_name(static_cast<Stream>(s))}}}});
      ev.push_back({{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", i + 1}, {"tid", s + 1},
                    {"args", {{"sort_index", s}}}});
    }
  }
  // Times on a whole nanosecond, so that a task starting when the previous one on its stream
  // ends does not overlap it by a rounding error (viewers drop events that do not nest).
  auto ns = [](double seconds) { return std::llround(seconds * 1e9); };
  auto us = [&](double seconds) { return static_cast<double>(ns(seconds)) / 1e3; };
  for (const auto& e : r.events) {
    const char* cat = e.stream == Stream::kCompute ? (e.name[0] == 'F' ? "forward" : "backward")
                      : e.name.starts_with("send ")  ? "p2p"
                      : e.stream == Stream::kCollective ? "collective"
                                                        : "copy";
    ev.push_back({{"name", e.name}, {"cat", cat}, {"ph", "X"}, {"ts", us(e.start)},
                  {"dur", static_cast<double>(ns(e.end) - ns(e.start)) / 1e3}, {"pid", e.stage + 1}, {"tid", static_cast<int>(e.stream) + 1}});
  }
  for (const auto& m : r.memory)
    ev.push_back({{"name", "memory"}, {"ph", "C"}, {"ts", us(m.time)}, {"pid", m.stage + 1},
                  {"args", {{"bytes", m.bytes}}}});
  // No displayTimeUnit: some Perfetto versions read it as the unit of ts.
  return Json{{"traceEvents", ev}};
}

}  // namespace mist::sim
