// Helpers of the lowering tests: evaluating an expression that must bind, finding an op by name.
#pragma once

#include <string_view>

#include <gtest/gtest.h>

#include "graph/layer.hpp"

namespace mist::graph::testing {

inline double eval(const Expr& e, const sym::Bindings& b) {
  auto v = sym::evaluate(e, b);
  EXPECT_TRUE(v.has_value()) << (v ? "" : v.error().to_string());
  return v ? *v : 0;
}

inline const Op* find_op(const Layer& L, std::string_view name) {
  for (const auto& op : L.ops)
    if (op.name == name) return &op;
  return nullptr;
}

}  // namespace mist::graph::testing
