// Where an op's time comes from, in order of precedence (docs/profile.md):
//   1. exact:      a profile entry for this device, op, shape, dtype and pass;
//   2. scaled:     an entry measured on another catalog device, scaled Habitat-style (compute-bound
//                  ops by the ratio of achievable matmul rates and GEMM wave utilisation,
//                  memory-bound ops by the ratio of memory bandwidths);
//   3. analytical: hardware::op_time.
// An OpTable is an in-memory snapshot of a profile database, read once by job::prepare and shared
// by value, so StageTimer resolves each op of a layer with one hash lookup.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/json_fields.hpp"
#include "graph/layer.hpp"
#include "hardware/perf_model.hpp"
#include "profile/database.hpp"

namespace mist::profile {

enum class Source { kExact, kScaled, kAnalytical };

// How many op times (forward and backward counted apart) came from each source.
struct SourceCounts {
  int exact = 0, scaled = 0, analytical = 0;
  int total() const { return exact + scaled + analytical; }
  void add(Source s) { (s == Source::kExact ? exact : s == Source::kScaled ? scaled : analytical) += 1; }
  bool operator==(const SourceCounts&) const = default;
};

// For reports: {"exact": n, "scaled": n, "analytical": n}, and one line of text.
Json to_json(const SourceCounts& c);
std::string describe(const SourceCounts& c);

// The shape key of every op of a layer: the layer's dimensions as bound for one micro-batch on one
// GPU, "b=2;s=256;h=512;a=8;g=2;f=1408;t=1" (blocks) with ";V=..." for the embedding and head.
std::string shape_key(graph::LayerKind kind, const sym::Bindings& at);

class OpTable {
 public:
  explicit OpTable(std::vector<Measurement> rows);
  // The snapshot of the database at `path`.
  static Result<std::shared_ptr<const OpTable>> load(const std::string& path);

  const Measurement* exact(const std::string& device, const std::string& op, const std::string& shape,
                           const std::string& dtype, const std::string& pass) const;
  // Entries of the same op, shape, dtype and pass on other devices, sorted by device name.
  std::vector<const Measurement*> others(const std::string& device, const std::string& op, const std::string& shape,
                                         const std::string& dtype, const std::string& pass) const;
  size_t size() const { return rows_.size(); }

 private:
  std::vector<Measurement> rows_;
  std::unordered_map<std::string, std::vector<size_t>> by_key_;  // op|shape|dtype|pass -> rows
};

// Factor that turns a time measured on `from` into one on `to` for this op (and pass: the
// backward GEMMs have their own shapes), or 0 when the two devices lack the figures to scale.
double scale_factor(const spec::GpuSpec& from, const spec::GpuSpec& to, spec::Dtype d, const graph::Op& op,
                    bool backward, const sym::Bindings& at, const hardware::PerfConstants& c = {});

struct ResolvedOp {
  hardware::OpTime time;
  Source fwd = Source::kAnalytical, bwd = Source::kAnalytical;
  bool has_bwd = false;  // the op has a backward (views and non-differentiable ops do not)
};

// The time of `op` of a layer with shape key `shape` on device `g`; `table` may be null (analytical).
ResolvedOp resolve_op(const OpTable* table, const spec::GpuSpec& g, spec::Dtype d, const graph::Op& op,
                      const std::string& shape, const sym::Bindings& at, const hardware::PerfConstants& c = {});

}  // namespace mist::profile
