// Private to src/spec: the embedded catalogs and helpers shared by the spec parsers.
#pragma once

#include <cmath>
#include <string>
#include <string_view>

#include "core/json_fields.hpp"
#include "spec/cluster.hpp"

namespace mist::spec::embedded {
// data/gpus.json and data/models.json, compiled in by cmake/embed_catalogs.cmake.
extern const std::string_view kGpusJson;
extern const std::string_view kModelsJson;
}  // namespace mist::spec::embedded

// Propagates the error of a Result<void>: MIST_SPEC_CHECK(f.reject_unknown({...}));
#ifndef MIST_SPEC_CHECK
#define MIST_SPEC_CHECK(expr)                                 \
  do {                                                        \
    if (auto mist_check_ = (expr); !mist_check_)              \
      return std::unexpected(std::move(mist_check_).error()); \
  } while (0)
#endif

namespace mist::spec::detail {

// One GPU object in the catalog form (docs/specs.md). Without `base` every field is required.
// With `base` (the catalog entry named by "name") every other field is an optional override.
Result<GpuSpec> gpu_from_json(const Json& j, const std::string& path, const GpuSpec* base);

// SI value -> value in `unit` (GiB, TB/s, ...) such that value * unit gives back exactly `si`,
// so that to_json -> from_json round-trips bit for bit. Nudges the quotient by a few ulps when
// plain division rounds the wrong way.
inline double in_unit(double si, double unit) {
  const double v = si / unit;
  if (v * unit == si) return v;
  double up = v, down = v;
  for (int i = 0; i < 8; ++i) {
    up = std::nextafter(up, HUGE_VAL);
    if (up * unit == si) return up;
    down = std::nextafter(down, -HUGE_VAL);
    if (down * unit == si) return down;
  }
  return v;
}

}  // namespace mist::spec::detail
