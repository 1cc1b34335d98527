// Helpers of the ModelSpec tests: a model from JSON text, and two models compared by shape.
#pragma once

#include <string_view>

#include <gtest/gtest.h>

#include "spec/model.hpp"
#include "../common/expect.hpp"

namespace mist::spec::testing {

inline Result<ModelSpec> model(std::string_view text) {
  return model_from_json(mist::testing::parse(text), "model");
}

// Same architecture, ignoring name and source.
inline void expect_same_shape(const ModelSpec& a, const ModelSpec& b) {
  ModelSpec x = a, y = b;
  x.name = y.name = "";
  x.source = y.source = "";
  EXPECT_EQ(x, y) << model_to_json(a).dump() << "\n" << model_to_json(b).dump();
}

}  // namespace mist::spec::testing
