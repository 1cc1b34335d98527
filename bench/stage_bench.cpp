// Closed-form stage evaluations for a 96-layer model (issue 3): GPT-3 175B on 128×8 A100-80GB,
// layout tp 8 · pp 16 · dp 8, micro-batch 1, GBS 1536, s 2048 (the SC21 run's shape), stages of 6
// blocks. Each benchmark reports items/s on one thread, i.e. per core:
//   StageTimerParts         T and D of one stage setting (StageTimer::parts)
//   MemoryProgram/N         the job's compiled memory program (every input free) over N rows
//   MemoryProgramFolded/N   the program with shapes and layout folded into constants, as the
//                           tuner specialises it per stage position, over N rows
//   StageEvaluation/N       folded memory program + StageTimer::parts for every row: one
//                           complete closed-form stage evaluation (memory, T, D)
//   StageKnobs              building one row's input bindings with analysis::stage_knobs
//   PredictPlan             analysis::predict of the whole 16-stage plan (what `mist predict` does)
//   LayoutSetup             what the tuner pays once per layout: StageTimer::create on the job's
//                           shared lowering (the lowering and memory model are built once per job)
//   PrepareJob              analysis::PreparedJob::create + the lowering and memory model, once
#include <benchmark/benchmark.h>

#include <array>
#include <vector>

#include "analysis/memory_model.hpp"
#include "analysis/overheads.hpp"
#include "analysis/prediction.hpp"
#include "analysis/time_model.hpp"
#include "graph/lower.hpp"
#include "jobs.hpp"
#include "tuner/space.hpp"
#include "tuner/stage_costs.hpp"

namespace mist::bench {
namespace {

struct Job96 {
  spec::ModelSpec m = model("gpt3-175b");
  spec::ClusterSpec c = cluster("A100-SXM4-80GB", 128, 8);
  spec::TrainingSpec t = training(1536, 2048, spec::Dtype::kBf16);
  analysis::PreparedJob job = *analysis::PreparedJob::create(m, c, t);
  plan::Plan layout;
  const graph::LoweredModel* lm = nullptr;
  const analysis::StageMemoryModel* memory = nullptr;
  std::vector<plan::StagePlan> settings;  // every mist-space setting of a 6-block stage
  double nccl = 0;

  Job96() {
    layout.dp = 8;
    layout.tp = 8;
    layout.pp = 16;
    layout.sequence_parallel = true;
    layout.micro_batch_size = 1;
    layout.grad_accum_steps = t.global_batch_size / layout.dp;
    const analysis::Lowering* lowering = *job.lowering(true, layout.recompute);
    lm = &lowering->model;
    memory = &lowering->memory;
    settings = tuner::stage_settings(*tuner::named_space("mist"), m.num_layers / layout.pp, layout.dp);
    nccl = analysis::nccl_buffer_bytes(layout, c);
  }
  analysis::StageTimer timer() const { return *analysis::StageTimer::create(job, layout); }
  plan::Plan full_plan() const {
    plan::Plan p = layout;
    for (int i = 0; i < layout.pp; ++i) {
      plan::StagePlan s;
      s.num_layers = m.num_layers / layout.pp;
      s.zero = 1;
      s.ckpt_layers = i < 8 ? 2 : 0;
      p.stages.push_back(s);
    }
    return p;
  }
};

const Job96& job() {
  static const Job96 j;
  return j;
}

int stage_of(size_t r) { return static_cast<int>(r % 16); }

void StageTimerParts(benchmark::State& state) {
  const auto& j = job();
  const auto timer = j.timer();
  size_t r = 0;
  for (auto _ : state) {
    const auto& s = j.settings[r % j.settings.size()];
    benchmark::DoNotOptimize(timer.parts(s, stage_of(r)));
    ++r;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(StageTimerParts);

// Column-major inputs of `prog` for the first `rows` settings (cycling), from stage_knobs.
std::vector<double> general_inputs(const Job96& j, size_t rows) {
  const auto& names = j.memory->inputs;
  std::vector<double> in(names.size() * rows);
  for (size_t r = 0; r < rows; ++r) {
    const auto b =
        analysis::stage_knobs(*j.lm, j.m, j.c, j.layout, j.settings[r % j.settings.size()], stage_of(r), j.nccl);
    for (size_t k = 0; k < names.size(); ++k) in[k * rows + r] = b.at(names[k]);
  }
  return in;
}

void MemoryProgram(benchmark::State& state) {
  const auto& j = job();
  const size_t rows = static_cast<size_t>(state.range(0));
  const auto in = general_inputs(j, rows);
  std::vector<double> out(j.memory->program.num_outputs() * rows);
  for (auto _ : state) {
    j.memory->program.evaluate(in, rows, out);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(rows));
  state.counters["instructions"] = static_cast<double>(j.memory->program.num_instructions());
  state.counters["outputs"] = static_cast<double>(j.memory->program.num_outputs());
}
BENCHMARK(MemoryProgram)->Arg(64)->Arg(1024)->Arg(16384);

// The tuner's own specialised program for stage `index` (tuner::MemoryPrograms): shapes, layout
// and stage position folded into constants, the setting knobs (analysis::kSettingKnobs) inputs.
const sym::Program& folded_program(const Job96& j, int index) {
  static tuner::MemoryPrograms programs(j.job);
  return **programs.get(j.layout, index);
}

std::vector<double> setting_inputs(const Job96& j, size_t rows, int index) {
  constexpr size_t n = analysis::kSettingKnobs.size();
  std::vector<double> in(n * rows);
  const double in_flight = analysis::in_flight_micro_batches(j.layout, index);
  for (size_t r = 0; r < rows; ++r) {
    const auto v = analysis::setting_knob_values(j.layout, j.settings[r % j.settings.size()], in_flight, j.nccl);
    for (size_t k = 0; k < n; ++k) in[k * rows + r] = v[k];
  }
  return in;
}

void MemoryProgramFolded(benchmark::State& state) {
  const auto& j = job();
  const size_t rows = static_cast<size_t>(state.range(0));
  const auto& prog = folded_program(j, 3);
  const auto in = setting_inputs(j, rows, 3);
  std::vector<double> out(2 * rows);
  for (auto _ : state) {
    prog.evaluate(in, rows, out);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(rows));
  state.counters["instructions"] = static_cast<double>(prog.num_instructions());
}
BENCHMARK(MemoryProgramFolded)->Arg(64)->Arg(1024)->Arg(16384);

void StageEvaluation(benchmark::State& state) {
  const auto& j = job();
  const size_t rows = static_cast<size_t>(state.range(0));
  const auto& prog = folded_program(j, 3);
  const auto timer = j.timer();
  const auto in = setting_inputs(j, rows, 3);
  std::vector<double> out(2 * rows);
  for (auto _ : state) {
    prog.evaluate(in, rows, out);
    double acc = 0;
    for (size_t r = 0; r < rows; ++r) {
      const auto p = timer.parts(j.settings[r % j.settings.size()], 3);
      acc += p.stable() + p.delta() + out[r];
    }
    benchmark::DoNotOptimize(acc);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(rows));
}
BENCHMARK(StageEvaluation)->Arg(1024)->Arg(16384);

void StageKnobs(benchmark::State& state) {
  const auto& j = job();
  size_t r = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        analysis::stage_knobs(*j.lm, j.m, j.c, j.layout, j.settings[r % j.settings.size()], stage_of(r), j.nccl));
    ++r;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(StageKnobs);

void PredictPlan(benchmark::State& state) {
  const auto& j = job();
  const auto p = j.full_plan();
  for (auto _ : state) {
    auto pred = analysis::predict(j.job, p);
    if (!pred) state.SkipWithError("the plan does not predict");
    benchmark::DoNotOptimize(pred->time.iteration_time_s + pred->memory.stages.back().peak_bytes);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(PredictPlan)->Unit(benchmark::kMillisecond);

void LayoutSetup(benchmark::State& state) {
  const auto& j = job();
  for (auto _ : state) {
    auto timer = analysis::StageTimer::create(j.job, j.layout);
    benchmark::DoNotOptimize(timer->model_flops_per_iteration());
  }
}
BENCHMARK(LayoutSetup)->Unit(benchmark::kMillisecond);

void PrepareJob(benchmark::State& state) {
  const auto& j = job();
  for (auto _ : state) {
    auto prepared = analysis::PreparedJob::create(j.m, j.c, j.t);
    auto lowering = prepared->lowering(true, j.layout.recompute);
    benchmark::DoNotOptimize((*lowering)->memory.program.num_instructions());
  }
}
BENCHMARK(PrepareJob)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace mist::bench
