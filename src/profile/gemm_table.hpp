// A measured sweep of GEMM shapes (a cuBLAS benchmark, XLA's GEMM performance table) as samples of
// the analytical GEMM time, for `mist fit --gemm-table` (docs/time-model.md, "GEMM efficiency and
// k"). The table: '#' lines (its provenance), then a header naming at least b, m, n, k and exactly
// one of seconds and flops_per_s, then one GEMM per line, comma-separated.
#pragma once

#include <istream>
#include <string>
#include <vector>

#include "core/result.hpp"
#include "hardware/fit.hpp"

namespace mist::profile {

struct GemmTable {
  std::vector<hardware::FitSample> samples;  // one per GEMM, linearised at the default constants
  std::vector<std::string> comments;         // the '#' lines, without the '#'
  // The comments joined by spaces, blank ones left out: the table's provenance.
  std::string source() const;
};

// Reads a table whose rows ran on `g` in `d`. Errors name "<name> line N[.column]"; a table without
// GEMM rows is an error with no path.
Result<GemmTable> parse_gemm_table(std::istream& in, const std::string& name, const spec::GpuSpec& g, spec::Dtype d);
// The table in `file` (named by its path in errors; "cannot read" with no path).
Result<GemmTable> read_gemm_table(const std::string& file, const spec::GpuSpec& g, spec::Dtype d);

}  // namespace mist::profile
