// `mist gpus` end to end (issue 7): every (GPU type, count) cell tuned on 2 threads, as the
// command does; one iteration each, wall-clock time (UseRealTime).
//   Gpus/gpt3-1.3b/3types-x-3counts     L4, A10G, H100 PCIe x {1, 2, 4}; GBS 16, s 1024, Megatron space
//   Large/Gpus/llama2-70b/4types-x-4counts[/fast]   H100, H200, A100 80GB, A100 40GB x {8, 16, 32, 64};
//                                        GBS 512, s 4096, bf16, flash; issue 7's target: 1 minute
//   Large/Gpus/llama2-70b/4types-x-4counts/l40s   H100, A100 80GB, H200, L40S x {8, 16, 32, 64}, the same job:
//                                        issue 18's case (PCIe-only L40S nodes are the slow cells); target 30 s
// Counters: cells, cells that fit, the cheapest-to-finish row's tokens/s.
#include <benchmark/benchmark.h>

#include <string>

#include "advisor/advisor.hpp"
#include "jobs.hpp"

namespace mist::bench {
namespace {

void compare(benchmark::State& state, const spec::ModelSpec& m, const spec::TrainingSpec& t,
             const advisor::AdvisorOptions& o) {
  for (auto _ : state) {
    auto r = advisor::compare_gpus(m, t, o);
    if (!r) {
      state.SkipWithError(r.error().to_string().c_str());
      return;
    }
    int fits = 0;
    for (const auto& row : r->rows) fits += row.feasible;
    state.counters["cells"] = static_cast<double>(r->rows.size());
    state.counters["fit"] = fits;
    state.counters["best_tokens_per_s"] = r->rows.front().tokens_per_s;
  }
}

advisor::AdvisorOptions options(std::vector<std::string> gpus, std::vector<int64_t> counts, const std::string& space) {
  advisor::AdvisorOptions o;
  o.gpus = std::move(gpus);
  o.counts = std::move(counts);
  o.space = *tuner::named_space(space);
  o.prices = *advisor::default_prices();
  o.threads = 2;
  return o;
}

void register_all() {
  auto add = [](const std::string& name, spec::ModelSpec m, spec::TrainingSpec t, advisor::AdvisorOptions o) {
    benchmark::RegisterBenchmark(name.c_str(), [m, t, o](benchmark::State& s) { compare(s, m, t, o); })
        ->Iterations(1)
        ->UseRealTime()
        ->Unit(benchmark::kSecond);
  };
  add("Gpus/gpt3-1.3b/3types-x-3counts", model("gpt3-1.3b"), training(16, 1024, spec::Dtype::kBf16),
      options({"L4-24GB", "A10G-24GB", "H100-PCIe-80GB"}, {1, 2, 4}, "megatron"));
  const auto big = options({"H100-SXM5-80GB", "H200-SXM-141GB", "A100-SXM4-80GB", "A100-SXM4-40GB"}, {8, 16, 32, 64},
                           "mist");
  const auto run = training(512, 4096, spec::Dtype::kBf16);
  add("Large/Gpus/llama2-70b/4types-x-4counts", model("llama2-70b"), run, big);
  add("Large/Gpus/llama2-70b/4types-x-4counts/l40s", model("llama2-70b"), run,
      options({"H100-SXM5-80GB", "A100-SXM4-80GB", "H200-SXM-141GB", "L40S-48GB"}, {8, 16, 32, 64}, "mist"));
  auto fast = big;  // what --fast does
  fast.space.weight_offload = fast.space.grad_offload = fast.space.opt_offload = fast.space.act_offload = {0, 0.5, 1};
  add("Large/Gpus/llama2-70b/4types-x-4counts/fast", model("llama2-70b"), run, fast);
}

const bool registered = (register_all(), true);

}  // namespace
}  // namespace mist::bench
