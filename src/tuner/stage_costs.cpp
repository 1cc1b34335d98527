#include "tuner/stage_costs.hpp"

#include <algorithm>
#include <limits>
#include <memory>
#include <span>

#include "analysis/overheads.hpp"

namespace mist::tuner {

Result<const sym::Program*> MemoryPrograms::get(const plan::Plan& layout, int index) {
  const bool sp = layout.sequence_parallel && layout.tp > 1;
  MIST_TRY(const analysis::Lowering* lowering, job_->lowering(layout));
  // Any setting: the knobs it sets are inputs, not bound.
  plan::StagePlan any;
  any.num_layers = 1;
  sym::Bindings fixed =
      analysis::stage_knobs(lowering->model, job_->model(), job_->cluster(), layout, any, index, 0);
  for (const char* k : kInputs) fixed.erase(k);
  // The exchange's buffers are the lowering's (graph::CpExchange): part of the program, not a knob.
  const int cp_comm = layout.cp > 1 ? static_cast<int>(layout.cp_comm) : 0;
  const int64_t cp_a2a = layout.cp_comm == plan::CpComm::kA2aP2p ? layout.cp_a2a : 1;
  const auto pkey = std::make_tuple(layout.tp, layout.cp, cp_comm, cp_a2a, layout.ep, layout.etp, sp,
                                    static_cast<int>(layout.recompute), fixed.at("E") > 0,
                                    fixed.at("H") > 0, fixed.at("T") > 0, fixed.at("Q") > 0);
  auto pit = programs_.find(pkey);
  if (pit != programs_.end()) return &pit->second;
  const auto& memory = lowering->memory;
  std::vector<std::string> inputs(kInputs.begin(), kInputs.end());
  MIST_TRY(auto prog, sym::Program::compile(
                          {sym::substitute(memory.peak, fixed), sym::substitute(memory.host_bytes, fixed)}, inputs));
  return &programs_.emplace(pkey, std::move(prog)).first->second;
}

Result<StageCosts> StageCosts::create(const analysis::PreparedJob& job, const SearchSpace& space,
                                      const plan::Plan& layout, MemoryPrograms& programs) {
  std::vector<const sym::Program*> progs;
  for (int i = 0; i < layout.pp; ++i) {
    MIST_TRY(auto prog, programs.get(layout, i));
    progs.push_back(prog);
  }
  MIST_TRY(auto timer, analysis::StageTimer::create(job, layout));
  const int64_t min_layers =
      plan::dense_blocks(job.model(), 0) * std::max<int64_t>(1, layout.virtual_pipeline_stages);
  return StageCosts(job.cluster(), space, layout, std::move(timer), std::move(progs),
                    analysis::nccl_buffer_bytes(layout, job.cluster(),
                                                analysis::uses_expert_groups(layout, job.model().is_moe()),
                                                job.training().moe_dispatcher == spec::MoeDispatcher::kAllGather),
                    job.usable_memory_bytes(), min_layers);
}

void StageCosts::memory(const std::vector<plan::StagePlan>& settings, int index, std::vector<double>& peak,
                        std::vector<double>& host, TuneStats& stats) const {
  const size_t rows = settings.size();
  const sym::Program& prog = *programs_[static_cast<size_t>(index)];
  constexpr size_t n_in = MemoryPrograms::kInputs.size();
  // Every element is written below: no zeroing.
  const auto in = std::make_unique_for_overwrite<double[]>(n_in * rows);
  std::vector<double> out(2 * rows);
  const analysis::SettingKnobs knobs(layout_, analysis::in_flight_micro_batches(layout_, index), nccl_);
  for (size_t r = 0; r < rows; ++r) {
    const auto v = knobs(settings[r]);
    for (size_t k = 0; k < n_in; ++k) in[k * rows + r] = v[k];
  }
  prog.evaluate(std::span<const double>(in.get(), n_in * rows), rows, out);
  peak.assign(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(rows));
  host.assign(out.begin() + static_cast<std::ptrdiff_t>(rows), out.end());
  stats.stage_settings_evaluated += static_cast<int64_t>(rows);
}

double StageCosts::excess(double peak, double host) const {
  const double host_cap = c_->host_memory_bytes / static_cast<double>(c_->gpus_per_node);
  return std::max(peak - usable_, host - host_cap);
}

std::vector<Point> StageCosts::cost(const std::vector<plan::StagePlan>& settings, int index, TuneStats& stats,
                                    Point* least) const {
  std::vector<Point> feasible;
  if (settings.empty()) return feasible;
  std::vector<double> peak, host;
  memory(settings, index, peak, host, stats);
  for (size_t r = 0; r < settings.size(); ++r) {
    if (index == 0 && settings[r].num_layers < first_stage_min_layers_) continue;
    const double e = excess(peak[r], host[r]);
    if (least && e < least->excess) *least = Point{0, 0, peak[r], settings[r], e};
    if (e > 0) continue;
    const auto t = timer_.parts(settings[r], index);
    feasible.push_back(Point{t.stable(), t.delta(), peak[r], settings[r], e, t.drain()});
  }
  stats.stage_settings_feasible += static_cast<int64_t>(feasible.size());
  stats.stage_settings_timed += static_cast<int64_t>(feasible.size());
  return feasible;
}

double* Misfits::row(int zero, int64_t c, size_t slice) {
  if (rows_.size() <= static_cast<size_t>(c)) rows_.resize(static_cast<size_t>(c) + 1);
  auto& r = rows_[static_cast<size_t>(c)][static_cast<size_t>(zero)];
  if (r.size() != slice) r.assign(slice, 0.0);
  return r.data();
}

std::vector<Point> StageCosts::candidates(int64_t layers, int index, TuneStats& stats, Point* least,
                                          Misfits* misfits) const {
  if (index == 0 && layers < first_stage_min_layers_) return {};  // the dense blocks would not fit in it
  if (misfits && layers < misfits->layers_) *misfits = Misfits();
  if (misfits) misfits->layers_ = layers;
  const SearchSpace& sp = *space_;
  const auto& W = sp.weight_offload;
  const auto& G = sp.grad_offload;
  const auto& A = sp.act_offload;
  const auto& O = sp.opt_offload;
  const size_t nw = W.size(), ng = G.size(), na = A.size(), no = O.size();
  const size_t slice = nw * ng * na * no;
  auto at = [&](size_t w, size_t g, size_t a, size_t o) { return ((w * ng + g) * na + a) * no + o; };

  std::vector<Point> out;
  std::vector<plan::StagePlan> batch;
  std::vector<size_t> where;
  std::vector<double> peak, host, peak_at(slice);
  std::vector<char> below(slice), fits(slice), reach(slice);
  for (int z : zero_choices(sp, plan::grad_dp(layout_))) {
    // below[s]: a fitting setting with fewer recomputed blocks and offload fractions ≤ s's exists.
    std::fill(below.begin(), below.end(), 0);
    for (int64_t c : ckpt_choices(sp, layers)) {
      batch.clear();
      where.clear();
      // known[s] > 0: s did not fit with fewer blocks, so it does not fit now. Where its excess
      // then is below the near miss so far, it is evaluated all the same: it may be the nearer.
      double* known = misfits ? misfits->row(z, c, slice) : nullptr;
      for (size_t w = 0; w < nw; ++w)
        for (size_t g = 0; g < ng; ++g) {
          if (!offload_allowed(sp, z, W[w], G[g])) continue;
          for (size_t a = 0; a < na; ++a)
            for (size_t o = 0; o < no; ++o) {
              const size_t s = at(w, g, a, o);
              if (below[s]) continue;  // beaten already: no need to know whether it fits
              if (known && known[s] > 0 && (!least || known[s] > least->excess)) continue;
              plan::StagePlan st;
              st.num_layers = layers;
              st.zero = z;
              st.ckpt_layers = c;
              st.offload = {W[w], G[g], O[o], A[a]};
              batch.push_back(st);
              where.push_back(s);
            }
        }
      std::fill(fits.begin(), fits.end(), 0);
      if (!batch.empty()) {
        memory(batch, index, peak, host, stats);
        for (size_t r = 0; r < batch.size(); ++r) {
          const double e = excess(peak[r], host[r]);
          if (least && e < least->excess) *least = Point{0, 0, peak[r], batch[r], e};
          if (e > 0) {
            if (known) known[where[r]] = e;
            continue;
          }
          fits[where[r]] = 1;
          peak_at[where[r]] = peak[r];
          ++stats.stage_settings_feasible;
        }
      }
      // reach[s]: some fitting setting ≤ s exists (same ZeRO level and optimizer offload). The
      // loops visit every setting after those one step below it.
      for (size_t w = 0; w < nw; ++w)
        for (size_t g = 0; g < ng; ++g)
          for (size_t a = 0; a < na; ++a) {
            // Among settings equal but for optimizer offload, only the smallest D can be optimal.
            Point best;
            bool have = false;
            for (size_t o = 0; o < no; ++o) {
              const size_t s = at(w, g, a, o);
              const bool beaten = below[s] || (w && reach[at(w - 1, g, a, o)]) ||
                                  (g && reach[at(w, g - 1, a, o)]) || (a && reach[at(w, g, a - 1, o)]);
              reach[s] = beaten || fits[s];
              if (!fits[s] || beaten) continue;
              plan::StagePlan st;
              st.num_layers = layers;
              st.zero = z;
              st.ckpt_layers = c;
              st.offload = {W[w], G[g], O[o], A[a]};
              const auto t = timer_.parts(st, index);
              ++stats.stage_settings_timed;
              if (!have || t.delta() < best.D)
                best = Point{t.stable(), t.delta(), peak_at[s], st, 0, t.drain()}, have = true;
            }
            if (have) out.push_back(std::move(best));
          }
      below.swap(reach);
    }
  }
  return out;
}

double StageCosts::fastest(int64_t layers, int index) const {
  const SearchSpace& sp = *space_;
  double best = std::numeric_limits<double>::infinity();
  for (int z : zero_choices(sp, plan::grad_dp(layout_))) {
    plan::StagePlan st;
    st.num_layers = layers;
    st.zero = z;
    st.ckpt_layers = ckpt_choices(sp, layers).front();
    st.offload = {sp.weight_offload.front(), sp.grad_offload.front(), 0, sp.act_offload.front()};
    // The optimizer offload fraction does not change T.
    best = std::min(best, timer_.parts(st, index).stable());
  }
  return best;
}

}  // namespace mist::tuner
