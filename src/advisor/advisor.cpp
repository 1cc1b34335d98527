#include "advisor/advisor.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>

#include <fmt/format.h>

#include "core/closest_names.hpp"
#include "core/units.hpp"
#include "tuner/tuner.hpp"

namespace mist::advisor {

namespace {

// One (GPU type, count) cell: tune, then cost.
Row tune_cell(const spec::ModelSpec& m, const spec::TrainingSpec& t, const spec::ClusterSpec& c,
              const AdvisorOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  Row row;
  row.gpu = c.gpu.name;
  row.num_gpus = c.num_gpus();
  row.nodes = c.nodes;
  row.gpus_per_node = c.gpus_per_node;
  row.price = find_price(o.prices, c.gpu.name);
  if (c.nodes > 1 && c.gpu.link_bw == 0)
    row.pcie_only = PcieOnlyNetwork{spec::pcie_x16_bw(c.gpu.pcie_gen), c.inter_node_bw, 0};
  tuner::TuneOptions to;
  to.space = o.space;
  to.engine = o.engine;
  to.top = 1;
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  auto prepared = job::prepare(m, c, t, o.calibration, o.prepare);
  auto r = prepared ? tuner::tune(*prepared, to) : Result<tuner::TuneResult>(std::unexpected(prepared.error()));
  if (!r) {
    // The GPU cannot run this job at all (no bf16, no layout of this many GPUs): a row, not an abort.
    row.reason = r.error().to_string();
    row.tune_seconds = seconds();
    return row;
  }
  if (r->best.empty()) {
    if (r->closest) {
      row.plan = r->closest->plan;
      row.shortfall_bytes = r->closest->shortfall_bytes;
      row.host_shortfall_bytes = r->closest->host_shortfall_bytes;
      row.peak_memory_bytes = r->closest->peak_memory_bytes;
      row.reason = row.shortfall_bytes > 0
                       ? fmt::format("no plan fits: the closest lacks {:.2f} GiB of GPU memory on its worst stage",
                                     row.shortfall_bytes / units::kGiB)
                       : fmt::format("no plan fits: the closest lacks {:.2f} GiB of host memory per node",
                                     row.host_shortfall_bytes / units::kGiB);
    } else {
      row.reason = "no plan fits";
    }
    row.tune_seconds = seconds();
    return row;
  }
  const auto& best = r->best.front();
  const auto& time = best.prediction.time;  // what `mist predict` says of the plan
  row.feasible = true;
  row.plan = best.plan;
  row.iteration_time_s = time.iteration_time_s;
  row.tokens_per_s = time.tokens_per_s;
  row.mfu = time.mfu;
  row.peak_memory_bytes = best.peak_memory_bytes;
  row.time_to_train_s = o.tokens / row.tokens_per_s;
  if (row.pcie_only) row.pcie_only->exposed_share = time.exposed_delta_s / time.iteration_time_s;
  if (row.price) row.cost = costs(row.tokens_per_s, o.tokens, row.num_gpus, row.price->usd_per_gpu_hour);
  row.tune_seconds = seconds();
  return row;
}

}  // namespace

Result<spec::GpuSpec> resolve_gpu(const std::string& name) {
  auto g = spec::catalog_gpu(name);
  if (g) return g;
  const std::vector<std::string> names = spec::gpu_catalog_names();
  if (names.empty()) return g;  // the catalog itself is broken: its own error says how
  return fail("", fmt::format("unknown GPU \"{}\" (closest: {}; 'mist list gpus' lists all)", name,
                              join(closest_names(name, names))));
}

Result<spec::ClusterSpec> cluster_for(const std::string& gpu, int64_t count, std::optional<int64_t> gpus_per_node) {
  MIST_TRY(spec::GpuSpec g, resolve_gpu(gpu));
  if (count < 1) return fail("--gpus", fmt::format("GPU counts must be positive, got {}", count));
  const int64_t node = gpus_per_node.value_or(g.default_gpus_per_node);
  if (node < 1) return fail("--gpus-per-node", fmt::format("must be positive, got {}", node));
  if (count > node && count % node != 0)
    return fail("--gpus", fmt::format("{} {} GPUs do not fill whole nodes of {}; use a multiple of {} (or "
                                      "--gpus-per-node)",
                                      count, gpu, node, node));
  const int64_t per_node = std::min(count, node);
  return spec::cluster_from_json(Json{{"gpu", gpu}, {"nodes", count / per_node}, {"gpus_per_node", per_node}},
                                 "cluster");
}

Costs costs(double tokens_per_s, double tokens, int64_t num_gpus, double usd_per_gpu_hour) {
  Costs c;
  c.usd_per_hour = usd_per_gpu_hour * static_cast<double>(num_gpus);
  const double hours = tokens / tokens_per_s / 3600.0;
  c.usd_total = hours * c.usd_per_hour;
  c.usd_per_million_tokens = c.usd_per_hour / (tokens_per_s * 3600.0) * 1e6;
  return c;
}

void mark_pareto(std::vector<Row>& rows) {
  auto eligible = [](const Row& r) { return r.feasible && r.price.has_value(); };
  for (auto& r : rows) {
    r.pareto = false;
    if (!eligible(r)) continue;
    r.pareto = std::none_of(rows.begin(), rows.end(), [&](const Row& o) {
      return eligible(o) && o.time_to_train_s <= r.time_to_train_s && o.cost.usd_total <= r.cost.usd_total &&
             (o.time_to_train_s < r.time_to_train_s || o.cost.usd_total < r.cost.usd_total);
    });
  }
}

void sort_rows(std::vector<Row>& rows) {
  auto key = [](const Row& r) {
    const int group = r.feasible ? (r.price ? 0 : 1) : 2;
    const double v = group == 0 ? r.cost.usd_total : group == 1 ? r.time_to_train_s : 0.0;
    return std::make_tuple(group, v, r.gpu, r.num_gpus);
  };
  std::stable_sort(rows.begin(), rows.end(), [&](const Row& a, const Row& b) { return key(a) < key(b); });
}

Result<Comparison> compare_gpus(const spec::ModelSpec& m, const spec::TrainingSpec& t, const AdvisorOptions& o) {
  if (o.gpus.empty()) return fail("--candidates", "name at least one GPU type");
  if (o.counts.empty()) return fail("--gpus", "name at least one GPU count");
  if (!(o.tokens > 0)) return fail("--tokens", fmt::format("must be positive, got {:g}", o.tokens));
  if (o.gpus_per_node && *o.gpus_per_node < 1)
    return fail("--gpus-per-node", fmt::format("must be positive, got {}", *o.gpus_per_node));
  // Every cell's cluster first, so that a bad name or count fails before minutes of tuning.
  std::vector<spec::ClusterSpec> cells;
  std::set<std::pair<std::string, int64_t>> seen;
  for (const auto& gpu : o.gpus) {
    for (int64_t n : o.counts) {
      if (!seen.insert({gpu, n}).second) continue;  // "--gpus 8,8" tunes once
      auto c = cluster_for(gpu, n, o.gpus_per_node);
      if (!c) {
        if (c.error().path.empty()) c.error().path = "--candidates";
        return std::unexpected(c.error());
      }
      cells.push_back(std::move(*c));
    }
  }
  // Bigger clusters have more layouts and take longer: start them first so that the threads
  // finish together instead of one tuning the 64-GPU cell alone at the end.
  std::stable_sort(cells.begin(), cells.end(),
                   [](const spec::ClusterSpec& a, const spec::ClusterSpec& b) { return a.num_gpus() > b.num_gpus(); });
  // Cells are independent and the tuner keeps no shared mutable state, so a few threads take
  // cells from a shared counter; each writes only its own row.
  std::vector<Row> rows(cells.size());
  std::atomic<size_t> next{0};
  size_t done = 0;
  std::mutex progress_mutex;
  auto worker = [&] {
    for (size_t i = next++; i < cells.size(); i = next++) {
      rows[i] = tune_cell(m, t, cells[i], o);
      if (o.progress) {
        std::lock_guard lock(progress_mutex);
        o.progress(++done, cells.size());
      }
    }
  };
  const int threads = std::clamp<int>(o.threads, 1, static_cast<int>(cells.size()));
  {
    std::vector<std::jthread> pool;
    for (int i = 1; i < threads; ++i) pool.emplace_back(worker);
    worker();
  }  // joined here
  Comparison out;
  for (const auto& r : rows)
    if (r.feasible) {
      auto [it, fresh] = out.smallest_fitting.emplace(r.gpu, r.num_gpus);
      if (!fresh) it->second = std::min(it->second, r.num_gpus);
    }
  mark_pareto(rows);
  sort_rows(rows);
  out.rows = std::move(rows);
  return out;
}

}  // namespace mist::advisor
