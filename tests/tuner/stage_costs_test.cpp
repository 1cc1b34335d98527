#include "tuner/stage_costs.hpp"

#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "tuner/inter_stage.hpp"
#include "tune_jobs.hpp"

namespace mist::tuner {
namespace {

struct Job {
  const char* model;
  const char* gpu;
  int64_t nodes, per_node, gbs, seq;
};

// Jobs where memory binds (so offloading and recomputation matter) and where it does not.
const Job kJobs[] = {{"gpt3-1.3b", "L4-24GB", 1, 4, 32, 2048},
                     {"mist-llama-2.7b", "A100-SXM4-40GB", 1, 4, 64, 4096},
                     {"gpt3-2.7b", "V100-SXM2-32GB", 2, 4, 64, 2048}};

struct Fixture {
  spec::ModelSpec m;
  spec::ClusterSpec c;
  spec::TrainingSpec t;
};

Fixture fixture(const Job& j) {
  Fixture f{*spec::catalog_model(j.model),
            *spec::cluster_from_json(Json{{"gpu", j.gpu}, {"nodes", j.nodes}, {"gpus_per_node", j.per_node}}, "cluster"),
            {}};
  f.t.global_batch_size = j.gbs;
  f.t.seq_length = j.seq;
  f.t.precision = f.c.gpu.bf16_flops > 0 ? spec::Dtype::kBf16 : spec::Dtype::kFp16;
  f.t.flash_attention = true;
  return f;
}

SearchSpace test_space() {
  SearchSpace s;
  s.tp = {1, 2};
  s.micro_batch = {1, 4};
  s.max_pp = 4;
  s.weight_offload = s.grad_offload = {0, 0.5, 1};
  s.opt_offload = {0, 0.5, 1};
  s.act_offload = {0, 0.5, 1};
  s.virtual_stages = {1, 2};
  return s;
}

// Calls fn(f, space, layout, costs) on every `stride`-th layout of test_space() for job `j`, from
// the `first`-th, with one MemoryPrograms for the job, as the tuner shares them.
template <class Fn>
void for_layouts(const Job& j, size_t first, size_t stride, Fn fn) {
  const auto f = fixture(j);
  const auto space = test_space();
  const auto job = analysis::PreparedJob::create(f.m, f.c, f.t);
  ASSERT_TRUE(job.has_value());
  MemoryPrograms programs(*job);
  const auto all = layouts(space, f.m, f.c, f.t);
  for (size_t n = first; n < all.size(); n += stride) {
    auto costs = StageCosts::create(*job, space, all[n], programs);
    ASSERT_TRUE(costs.has_value()) << costs.error().to_string();
    fn(f, space, all[n], *costs);
  }
}

// StageCosts::candidates prunes exactly only if raising recomputation or a weight, gradient or
// activation offload fraction never lowers T, T - B nor T + v·D; and optimizer offload leaves T
// and B alone.
TEST(StageCosts, TimeModelIsMonotoneWhereThePruningAssumesIt) {
  const double eps = 1e-12;
  int checked = 0;
  for (const auto& j : kJobs) {
    const auto f = fixture(j);
    const auto space = test_space();
    const auto job = analysis::PreparedJob::create(f.m, f.c, f.t);
    ASSERT_TRUE(job.has_value());
    for (const auto& layout : layouts(space, f.m, f.c, f.t)) {
      auto created = analysis::StageTimer::create(*job, layout);
      ASSERT_TRUE(created.has_value());
      const auto& timer = *created;
      const int64_t l = f.m.num_layers / layout.pp;
      const double v = static_cast<double>(layout.virtual_pipeline_stages);
      for (int i : {0, static_cast<int>(layout.pp) - 1})
        for (const auto& s : stage_settings(space, l, layout.dp)) {
          const auto a = timer.parts(s, i);
          auto raised = [&](plan::StagePlan r) {
            const auto b = timer.parts(r, i);
            EXPECT_GE(b.stable(), a.stable() - eps * a.stable());
            EXPECT_GE(b.stable() - b.drain(), a.stable() - a.drain() - eps * a.stable());
            EXPECT_GE(b.stable() + v * b.delta(), a.stable() + v * a.delta() - eps * a.stable()) << "v " << v;
            ++checked;
          };
          plan::StagePlan r = s;
          if (s.ckpt_layers < l) r.ckpt_layers++, raised(r);
          r = s;
          if (s.offload.weights < 1) r.offload.weights += 0.5, raised(r);
          r = s;
          if (s.offload.gradients < 1) r.offload.gradients += 0.5, raised(r);
          r = s;
          if (s.offload.activations < 1) r.offload.activations += 0.5, raised(r);
          r = s;
          if (s.offload.optimizer_states < 1) {
            r.offload.optimizer_states += 0.5;
            EXPECT_DOUBLE_EQ(timer.parts(r, i).stable(), a.stable());
            EXPECT_DOUBLE_EQ(timer.parts(r, i).drain(), a.drain());
          }
        }
    }
  }
  EXPECT_GT(checked, 10000);
}

// Every fitting setting is matched by a candidate that is no worse in T, T - B and T + v·D, so
// the pruned candidates lose nothing the pipeline objective can see.
TEST(StageCosts, CandidatesCoverEveryFittingSetting) {
  int covered = 0, pruned_total = 0;
  for (size_t k = 0; k < std::size(kJobs); k += testing::kSanitized ? 2 : 1)
    for_layouts(kJobs[k], 0, 1, [&](const Fixture& f, const SearchSpace& space, const plan::Plan& layout,
                                    const StageCosts& costs) {
      const int64_t l = f.m.num_layers / layout.pp;
      const double v = static_cast<double>(layout.virtual_pipeline_stages);
      for (int i = 0; i < layout.pp; ++i) {
        TuneStats stats;
        const auto all = costs.cost(stage_settings(space, l, layout.dp), i, stats, nullptr);
        const auto cand = costs.candidates(l, i, stats, nullptr);
        EXPECT_LE(cand.size(), all.size());
        pruned_total += static_cast<int>(all.size() - cand.size());
        for (const auto& p : all) {
          const bool ok = std::any_of(cand.begin(), cand.end(), [&](const Point& q) {
            return q.T <= p.T * (1 + 1e-12) && q.T - q.B <= (p.T - p.B) + 1e-12 * p.T &&
                   q.T + v * q.D <= (p.T + v * p.D) * (1 + 1e-12);
          });
          EXPECT_TRUE(ok) << "layout dp " << layout.dp << " tp " << layout.tp << " pp " << layout.pp << " stage " << i
                          << ": zero " << p.st.zero << " c " << p.st.ckpt_layers << " offload " << p.st.offload.weights
                          << "/" << p.st.offload.gradients << "/" << p.st.offload.optimizer_states << "/"
                          << p.st.offload.activations;
          covered += ok;
        }
        // Candidates fit, as the full costing says.
        for (const auto& q : cand)
          EXPECT_TRUE(std::any_of(all.begin(), all.end(), [&](const Point& p) {
            return p.st.zero == q.st.zero && p.st.ckpt_layers == q.st.ckpt_layers && p.st.offload == q.st.offload;
          }));
      }
    });
  EXPECT_GT(covered, 1000);
  EXPECT_GT(pruned_total, covered / 2);  // the pruning does prune
}

// Misfits skips a setting that did not fit with fewer blocks only if a stage's peak GPU memory and
// host memory never fall as it takes more blocks (v more: whole chunks) at the same setting.
TEST(StageCosts, MemoryNeverFallsAsAStageTakesMoreBlocks) {
  int checked = 0;
  auto jobs = std::vector<Job>(std::begin(kJobs), std::end(kJobs));
  jobs.push_back({"qwen1.5-moe-a2.7b", "A100-SXM4-40GB", 1, 8, 64, 4096});  // experts
  jobs.push_back({"deepseek-v3", "H100-SXM5-80GB", 1, 8, 64, 4096});        // dense first blocks
  bool failed = false;
  // A spread of the layouts (each costs ~10⁶ settings), sparser under the sanitizers.
  const size_t stride = testing::kSanitized ? 23 : 7;
  for (size_t k = 0; k < jobs.size() && !failed; k += testing::kSanitized ? 2 : 1)
    for_layouts(jobs[k], k % stride, stride, [&](const Fixture& f, const SearchSpace& space,
                                                 const plan::Plan& layout, const StageCosts& costs) {
      if (failed) return;
      const int64_t v = layout.virtual_pipeline_stages;
      for (int i : {0, static_cast<int>(layout.pp / 2), static_cast<int>(layout.pp) - 1})
        for (int64_t l = v; l <= f.m.num_layers / layout.pp + 2 * v; l += v) {
          TuneStats stats;
          auto settings = stage_settings(space, l, layout.dp);
          std::vector<double> peak, host, peak_more, host_more;
          costs.memory(settings, i, peak, host, stats);
          for (auto& s : settings) s.num_layers += v;
          costs.memory(settings, i, peak_more, host_more, stats);
          for (size_t r = 0; r < settings.size(); ++r, ++checked)
            if (peak_more[r] < peak[r] * (1 - 1e-12) || host_more[r] < host[r] * (1 - 1e-12)) {
              ADD_FAILURE() << jobs[k].model << " pp " << layout.pp << " v " << v << " stage " << i << " l " << l
                            << " zero " << settings[r].zero << " c " << settings[r].ckpt_layers << ": peak "
                            << peak[r] << " -> " << peak_more[r] << ", host " << host[r] << " -> " << host_more[r];
              failed = true;
              return;
            }
        }
    });
  EXPECT_GT(checked, testing::kSanitized ? 100000 : 1000000);
}

// What Misfits remembers across rising layer counts changes neither the candidates nor the near
// miss, and saves evaluations.
TEST(StageCosts, MisfitsChangeNothingButTheWork) {
  int64_t with_total = 0, without_total = 0;
  for (size_t k = 0; k < std::size(kJobs); k += testing::kSanitized ? 2 : 1)
    for_layouts(kJobs[k], 0, 1, [&](const Fixture& f, const SearchSpace&, const plan::Plan& layout,
                                    const StageCosts& costs) {
      const int64_t v = layout.virtual_pipeline_stages;
      const int64_t mid = f.m.num_layers / layout.pp / v * v;
      for (int i = 0; i < layout.pp; ++i) {
        Misfits misfits;
        for (int64_t l = std::max(v, mid - 3 * v); l <= mid + 3 * v; l += v) {
          TuneStats with, without;
          Point near_with{0, 0, 0, {}, std::numeric_limits<double>::infinity()}, near_without = near_with;
          const bool track = l == mid;  // the near miss is tracked at one count, as the tuner does
          const auto a = costs.candidates(l, i, with, track ? &near_with : nullptr, &misfits);
          const auto b = costs.candidates(l, i, without, track ? &near_without : nullptr);
          ASSERT_EQ(a.size(), b.size()) << "pp " << layout.pp << " stage " << i << " l " << l;
          for (size_t r = 0; r < a.size(); ++r) {
            EXPECT_EQ(a[r].T, b[r].T);
            EXPECT_EQ(a[r].D, b[r].D);
            EXPECT_EQ(a[r].peak, b[r].peak);
            EXPECT_TRUE(a[r].st == b[r].st);
          }
          EXPECT_EQ(near_with.excess, near_without.excess);
          EXPECT_TRUE(near_with.st == near_without.st);
          with_total += with.stage_settings_evaluated;
          without_total += without.stage_settings_evaluated;
        }
      }
    });
  EXPECT_LT(with_total, without_total);
}

TEST(InterStage, ParetoSampleKeepsTheEndsAndDropsBeatenPoints) {
  std::vector<Point> pts;
  for (int k = 0; k < 20; ++k) pts.push_back(Point{1.0 + k, 20.0 - 1.5 * k, 0, {}, 0});  // T + D falls
  pts.push_back(Point{5, 100, 0, {}, 0});                                                // beaten
  auto front = pareto_sample(pts, 0);
  EXPECT_EQ(front.size(), 20u);
  auto five = pareto_sample(pts, 5);
  ASSERT_EQ(five.size(), 5u);
  EXPECT_EQ(five.front().T, 1.0);
  EXPECT_EQ(five.back().T, 20.0);
  // A point with larger T and larger T + D is never kept, even with a smaller D.
  auto two = pareto_sample({Point{1, 5, 0, {}, 0}, Point{2, 4.5, 0, {}, 0}}, 0);
  EXPECT_EQ(two.size(), 1u);
  // Unless more of its time is backward, which hides later stages' deltas (T - B 0.2 < 1).
  EXPECT_EQ(pareto_sample({Point{1, 5, 0, {}, 0}, Point{2, 4.5, 0, {}, 0, 1.8}}, 0).size(), 2u);
  // Interleaved, D counts v times against T: 1 + 2·5 > 2 + 2·4.4.
  EXPECT_EQ(pareto_sample({Point{1, 5, 0, {}, 0}, Point{2, 4.4, 0, {}, 0}}, 0, 2).size(), 2u);
  EXPECT_EQ(pareto_sample({Point{1, 5, 0, {}, 0}, Point{2, 4.4, 0, {}, 0}}, 0, 1).size(), 1u);
}

}  // namespace
}  // namespace mist::tuner
