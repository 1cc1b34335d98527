// Helpers the tests of several components share: JSON from text, and an error expected at a field.
#pragma once

#include <string_view>

#include <gtest/gtest.h>

#include "core/json_fields.hpp"
#include "core/result.hpp"

namespace mist::testing {

inline Json parse(std::string_view text) {
  auto j = parse_json_text(text, "test");
  EXPECT_TRUE(j.has_value()) << j.error().to_string();
  return j ? *j : Json();
}

// `r` failed at `path` with a message that contains `word`.
template <class T>
void expect_error(const Result<T>& r, std::string_view path, std::string_view word) {
  ASSERT_FALSE(r.has_value()) << "expected an error at " << path;
  EXPECT_EQ(r.error().path, path) << r.error().to_string();
  EXPECT_NE(r.error().message.find(word), std::string::npos)
      << "message lacks \"" << word << "\": " << r.error().to_string();
}

}  // namespace mist::testing
