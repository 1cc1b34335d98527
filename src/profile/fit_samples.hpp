// Measured profile rows as the samples `mist fit --profile-db` fits the op-time constants to
// (hardware/fit.hpp): each row's op is lowered again from its shape key and its kernels
// (hardware/op_cost.hpp) give the features, so a row is linearised by the same description of the
// op that the prediction times it with.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "graph/layer.hpp"
#include "hardware/fit.hpp"
#include "profile/database.hpp"

namespace mist::profile {

// "b=2;s=256;h=512;a=8;g=2;f=1408;t=1[;V=1000]" (op_source.hpp: shape_key) -> bindings; empty on a
// malformed key, one lacking a block dimension, or a dimension that is not a whole number in [1, 1e9].
sym::Bindings parse_shape(const std::string& key);

// The lowered op a profile row measured. The row carries the op's name and kind and its layer's
// dimensions, not the model; the variants of the lowering (GELU or SwiGLU MLP, LayerNorm or
// RMSNorm, flash attention or not) name their ops apart, so the op is found by name in the variant
// that has it. nullopt when no variant has it (a whole layer's row, a kind mist does not know).
std::optional<graph::Op> find_op(const Measurement& row, const sym::Bindings& at, int act_bytes);

// The features of one row on `g` in `d`, or nullopt when the row is not one op's pass that runs a
// kernel (a whole layer, a view, a pass the model times as nothing, an unreadable shape key).
std::optional<hardware::FitSample> sample_of(const Measurement& row, const spec::GpuSpec& g, spec::Dtype d);

// The samples of every row of `device` in `dtype_name`, and how many of those rows were skipped.
struct ProfileSamples {
  std::vector<hardware::FitSample> samples;
  int skipped = 0;
};
ProfileSamples samples_of(const std::vector<Measurement>& rows, const std::string& device,
                          const std::string& dtype_name, const spec::GpuSpec& g, spec::Dtype d);

// The dtype most of `device`'s rows have (the first by name among equals); nullopt without rows.
std::optional<std::string> most_common_dtype(const std::vector<Measurement>& rows, const std::string& device);

// Samples split for a held-out check: every n-th distinct group (shape key, in sorted order) is
// held out of the fit and scored apart; `every` <= 1 holds out nothing.
struct HeldOutSplit {
  std::vector<hardware::FitSample> train, test;
  std::set<std::string> held;  // the held-out groups
};
HeldOutSplit hold_out(const std::vector<hardware::FitSample>& samples, int every);

}  // namespace mist::profile
