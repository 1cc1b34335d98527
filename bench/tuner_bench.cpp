// `mist tune` end to end (issue 5), one iteration each, wall-clock time (UseRealTime):
//   Tune/gpt3-1.3b/1x4xL4            GBS 64, s 2048, fp16, flash
//   Tune/mist-gpt-22b/4x8xL4         GBS 512, s 2048, fp16, flash (Mist's tuning-time job; target 10 s)
//   Sweep/GPUs/mist-gpt-22b/{1,2}x8xL4, Sweep/Layers/mist-gpt-22b-L{24,96}/4x8xL4: growth
//   Large/llama2-70b/8x8xH100        GBS 1024, s 4096, bf16, flash (Llama 2's 4M-token batch; 30 s)
//   Large/gpt3-175b/128x8xA100-80GB  GBS 1536, s 2048, bf16, flash (SC21's 175B run; 2 minutes)
//   MoE/qwen3-30b-a3b/2x8xH100      GBS 1024, s 4096, bf16 (issue 16: 5 s), the full space and
//                                    --engine megatron's; ep and etp searched with dp, tp, pp
//   MoE/mixtral-8x7b/2x8xH100        GBS 256, s 4096, bf16, the same two spaces
//   MoE/gpt-oss-120b/8x8xH100        GBS 1280, s 4096, bf16 (Megatron-Bridge's row), the same two spaces
//   MoE/deepseek-v3/128x8xH100       GBS 8192, s 4096, bf16 (issue 16: 20 s), the same two spaces
//   LongContext/llama3-8b-s131072/1x8xH100  GBS 8, bf16 (issue 17): cp searched with tp, dp, pp;
//                                    the full space and --engine megatron's
//   Large/llama3-70b-s32768/4x8xH100 GBS 64, bf16, the full space with cp (46 s)
// The Large ones take minutes and run only when asked for (scripts/bench.sh --large).
// Counters: layouts, stage settings costed, settings that fit, the best plan's predicted
// iteration time (0 when nothing fits).
#include <benchmark/benchmark.h>

#include <optional>
#include <string>
#include <utility>

#include "jobs.hpp"
#include "tuner/tuner.hpp"

namespace mist::bench {
namespace {

void tune_job(benchmark::State& state, const spec::ModelSpec& m, const spec::ClusterSpec& c,
              const spec::TrainingSpec& t, std::optional<engines::Engine> engine = std::nullopt) {
  tuner::TuneOptions o;
  o.space = engine ? tuner::engine_space(*engine) : *tuner::named_space("mist");
  o.engine = engine;
  o.top = 1;
  for (auto _ : state) {
    auto job = analysis::PreparedJob::create(m, c, t);  // part of what `mist tune` pays
    auto r = job ? tuner::tune(*job, o) : Result<tuner::TuneResult>(std::unexpected(job.error()));
    if (!r) {
      state.SkipWithError(r.error().to_string().c_str());
      return;
    }
    state.counters["layouts"] = static_cast<double>(r->stats.layouts);
    state.counters["settings"] = static_cast<double>(r->stats.stage_settings_evaluated);
    state.counters["feasible"] = static_cast<double>(r->stats.stage_settings_feasible);
    state.counters["iteration_s"] = r->best.empty() ? 0.0 : r->best[0].iteration_time_s;
    state.counters["settings_per_s"] =
        benchmark::Counter(static_cast<double>(r->stats.stage_settings_evaluated), benchmark::Counter::kIsRate);
  }
}

const spec::TrainingSpec kL4Run = training(512, 2048, spec::Dtype::kFp16);

void register_all() {
  auto add = [](const std::string& name, spec::ModelSpec m, spec::ClusterSpec c, spec::TrainingSpec t) {
    benchmark::RegisterBenchmark(name.c_str(), [m, c, t](benchmark::State& s) { tune_job(s, m, c, t); })
        ->Iterations(1)
        ->UseRealTime()
        ->Unit(benchmark::kSecond);
  };
  add("Tune/gpt3-1.3b/1x4xL4", model("gpt3-1.3b"), cluster("L4-24GB", 1, 4), training(64, 2048, spec::Dtype::kFp16));
  add("Tune/mist-gpt-22b/4x8xL4", model("mist-gpt-22b"), cluster("L4-24GB", 4, 8), kL4Run);
  // The 4×8 GPU, 48-layer point of both sweeps is Tune/mist-gpt-22b/4x8xL4.
  for (int nodes : {1, 2})
    add("Sweep/GPUs/mist-gpt-22b/" + std::to_string(nodes) + "x8xL4", model("mist-gpt-22b"), cluster("L4-24GB", nodes, 8),
        kL4Run);
  for (int layers : {24, 96})
    add("Sweep/Layers/mist-gpt-22b-L" + std::to_string(layers) + "/4x8xL4", model("mist-gpt-22b", layers),
        cluster("L4-24GB", 4, 8), kL4Run);
  for (auto [name, engine] : {std::pair{"", std::optional<engines::Engine>()},
                              std::pair{"/megatron", std::optional<engines::Engine>(engines::Engine::kMegatron)}}) {
    const auto h100 = cluster("H100-SXM5-80GB", 2, 8);
    const auto qwen3 = model("qwen3-30b-a3b"), mixtral = model("mixtral-8x7b");
    const auto t1024 = training(1024, 4096, spec::Dtype::kBf16), t256 = training(256, 4096, spec::Dtype::kBf16);
    const std::optional<engines::Engine> e = engine;
    benchmark::RegisterBenchmark((std::string("MoE/qwen3-30b-a3b/2x8xH100") + name).c_str(),
                                 [=](benchmark::State& s) { tune_job(s, qwen3, h100, t1024, e); })
        ->Iterations(1)->UseRealTime()->Unit(benchmark::kSecond);
    benchmark::RegisterBenchmark((std::string("MoE/mixtral-8x7b/2x8xH100") + name).c_str(),
                                 [=](benchmark::State& s) { tune_job(s, mixtral, h100, t256, e); })
        ->Iterations(1)->UseRealTime()->Unit(benchmark::kSecond);
    const auto gpt_oss = model("gpt-oss-120b");
    const auto h100x64 = cluster("H100-SXM5-80GB", 8, 8);
    const auto t1280 = training(1280, 4096, spec::Dtype::kBf16);
    benchmark::RegisterBenchmark((std::string("MoE/gpt-oss-120b/8x8xH100") + name).c_str(),
                                 [=](benchmark::State& s) { tune_job(s, gpt_oss, h100x64, t1280, e); })
        ->Iterations(1)->UseRealTime()->Unit(benchmark::kSecond);
    const auto deepseek = model("deepseek-v3");
    const auto h100x1024 = cluster("H100-SXM5-80GB", 128, 8);
    const auto t8192 = training(8192, 4096, spec::Dtype::kBf16);
    benchmark::RegisterBenchmark((std::string("MoE/deepseek-v3/128x8xH100") + name).c_str(),
                                 [=](benchmark::State& s) { tune_job(s, deepseek, h100x1024, t8192, e); })
        ->Iterations(1)->UseRealTime()->Unit(benchmark::kSecond);
  }
  for (auto [name, engine] : {std::pair{"", std::optional<engines::Engine>()},
                              std::pair{"/megatron", std::optional<engines::Engine>(engines::Engine::kMegatron)}}) {
    const auto m = model("llama3-8b");
    const auto c = cluster("H100-SXM5-80GB", 1, 8);
    const auto t = training(8, 131072, spec::Dtype::kBf16);
    const std::optional<engines::Engine> e = engine;
    benchmark::RegisterBenchmark((std::string("LongContext/llama3-8b-s131072/1x8xH100") + name).c_str(),
                                 [=](benchmark::State& s) { tune_job(s, m, c, t, e); })
        ->Iterations(1)->UseRealTime()->Unit(benchmark::kSecond);
  }
  add("Large/llama3-70b-s32768/4x8xH100", model("llama3-70b"), cluster("H100-SXM5-80GB", 4, 8),
      training(64, 32768, spec::Dtype::kBf16));
  add("Large/llama2-70b/8x8xH100", model("llama2-70b"), cluster("H100-SXM5-80GB", 8, 8),
      training(1024, 4096, spec::Dtype::kBf16));
  add("Large/gpt3-175b/128x8xA100-80GB", model("gpt3-175b"), cluster("A100-SXM4-80GB", 128, 8),
      training(1536, 2048, spec::Dtype::kBf16));
}

const bool registered = (register_all(), true);

}  // namespace
}  // namespace mist::bench
