#include "profile/op_source.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include <fmt/format.h>

#include "spec/cluster.hpp"

namespace mist::profile {

namespace {

std::string key(const std::string& op, const std::string& shape, const std::string& dtype, const std::string& pass) {
  return op + '|' + shape + '|' + dtype + '|' + pass;
}

// A pass that runs a GEMM or fused attention scales with the matmul rate, any other with bandwidth.
bool compute_bound(const std::vector<hardware::Kernel>& kernels) {
  return std::any_of(kernels.begin(), kernels.end(),
                     [](const hardware::Kernel& k) { return !std::holds_alternative<hardware::StreamKernel>(k); });
}

}  // namespace

Json to_json(const SourceCounts& c) {
  return {{"exact", c.exact}, {"scaled", c.scaled}, {"analytical", c.analytical}};
}

std::string describe(const SourceCounts& c) {
  return fmt::format("op times: {} measured on this device, {} scaled from another device, {} analytical (of {})",
                     c.exact, c.scaled, c.analytical, c.total());
}

std::string shape_key(graph::LayerKind kind, const sym::Bindings& at) {
  auto dim = [&](const char* s) {
    auto it = at.find(s);
    if (it == at.end()) return std::string("?");
    // Whole numbers in full ("V=1000000", not "1e+06"), as a profiler in any language writes them.
    const double v = it->second;
    return v == std::floor(v) && std::fabs(v) < 9e15 ? fmt::format("{}", static_cast<long long>(v)) : fmt::format("{}", v);
  };
  std::string k = fmt::format("b={};s={};h={};a={};g={};f={};t={}", dim("b"), dim("s"), dim("h"), dim("a"), dim("g"),
                              dim("f"), dim("t"));
  if (kind != graph::LayerKind::kBlock) k += ";V=" + dim("V");
  return k;
}

OpTable::OpTable(std::vector<Measurement> rows) : rows_(std::move(rows)) {
  std::sort(rows_.begin(), rows_.end(), [](const Measurement& a, const Measurement& b) { return a.device < b.device; });
  for (size_t i = 0; i < rows_.size(); ++i) {
    const auto& m = rows_[i];
    by_key_[key(m.op, m.shape, m.dtype, m.pass)].push_back(i);
  }
}

Result<std::shared_ptr<const OpTable>> OpTable::load(const std::string& path) {
  std::error_code ec;
  (void)std::filesystem::file_size(path, ec);  // SQLite would create a missing file
  if (ec) return fail("profile_db", fmt::format("cannot read '{}': {}", path, ec.message()));
  MIST_TRY(auto db, Database::open(path));
  MIST_TRY(auto rows, db.all());
  return std::make_shared<const OpTable>(std::move(rows));
}

const Measurement* OpTable::exact(const std::string& device, const std::string& op, const std::string& shape,
                                  const std::string& dtype, const std::string& pass) const {
  auto it = by_key_.find(key(op, shape, dtype, pass));
  if (it == by_key_.end()) return nullptr;
  for (size_t i : it->second)
    if (rows_[i].device == device) return &rows_[i];
  return nullptr;
}

std::vector<const Measurement*> OpTable::others(const std::string& device, const std::string& op,
                                                const std::string& shape, const std::string& dtype,
                                                const std::string& pass) const {
  std::vector<const Measurement*> out;
  auto it = by_key_.find(key(op, shape, dtype, pass));
  if (it == by_key_.end()) return out;
  for (size_t i : it->second)
    if (rows_[i].device != device) out.push_back(&rows_[i]);
  return out;
}

double scale_factor(const spec::GpuSpec& from, const spec::GpuSpec& to, spec::Dtype d, const graph::Op& op,
                    bool backward, const sym::Bindings& at, const hardware::PerfConstants& c) {
  const auto kernels = hardware::op_kernels(op, at, d, backward ? hardware::Pass::kBackward : hardware::Pass::kForward);
  if (!compute_bound(kernels)) return from.mem_bw > 0 && to.mem_bw > 0 ? from.mem_bw / to.mem_bw : 0;
  const double r_from = hardware::achievable_matmul_flops(from, d, c), r_to = hardware::achievable_matmul_flops(to, d, c);
  if (!(r_from > 0 && r_to > 0)) return 0;
  double factor = r_from / r_to;
  // Time ∝ Σ 1/utilisation over the pass's GEMMs (equal FLOPs each): forward C = A·B, backward dA
  // and dB, each by the shape of its output.
  double inv_from = 0, inv_to = 0;
  bool gemm = false;
  for (const auto& k : kernels)
    if (const auto* mm = std::get_if<hardware::GemmKernel>(&k)) {
      inv_from += 1 / hardware::wave_utilisation(from, mm->batch, mm->m, mm->n);
      inv_to += 1 / hardware::wave_utilisation(to, mm->batch, mm->m, mm->n);
      gemm = true;
    }
  if (gemm) factor *= inv_to / inv_from;
  return factor;
}

ResolvedOp resolve_op(const OpTable* table, const spec::GpuSpec& g, spec::Dtype d, const graph::Op& op,
                      const std::string& shape, const sym::Bindings& at, const hardware::PerfConstants& c) {
  ResolvedOp r;
  r.time = hardware::op_time(g, d, op, at, c);
  r.has_bwd = hardware::has_backward(op);
  if (!table || op.kind == graph::OpKind::kView) return r;
  // An FP8 linear is never timed from bf16 measurements.
  const std::string dtype = op.fp8 ? "fp8" : spec::to_string(d);
  auto from_table = [&](const char* pass, bool backward, double& seconds, Source& src) {
    if (const Measurement* m = table->exact(g.name, op.name, shape, dtype, pass)) {
      seconds = m->median_s;
      src = Source::kExact;
      return;
    }
    for (const Measurement* m : table->others(g.name, op.name, shape, dtype, pass)) {
      auto from = spec::catalog_gpu(m->device);
      if (!from) continue;  // a device mist does not know cannot be scaled from
      const double f = scale_factor(*from, g, d, op, backward, at, c);
      if (f > 0) {
        seconds = m->median_s * f;
        src = Source::kScaled;
        return;
      }
    }
  };
  from_table("forward", false, r.time.fwd, r.fwd);
  if (r.has_bwd) from_table("backward", true, r.time.bwd, r.bwd);
  return r;
}

}  // namespace mist::profile
