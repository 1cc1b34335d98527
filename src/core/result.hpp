// Error channel for invalid input: every loader and validator returns Result<T>.
// An Error names the offending field by its path ("plan.stages[1].zero") and says why.
#pragma once

#include <expected>
#include <string>
#include <utility>

namespace mist {

struct Error {
  std::string path;     // dotted path of the field at fault, "" when not tied to one field
  std::string message;  // what is wrong and, where possible, what would be right

  std::string to_string() const { return path.empty() ? message : path + ": " + message; }
};

template <class T>
using Result = std::expected<T, Error>;

inline std::unexpected<Error> fail(std::string path, std::string message) {
  return std::unexpected(Error{std::move(path), std::move(message)});
}

}  // namespace mist

// Propagates an error: MIST_TRY(auto x, load(...));
#define MIST_CONCAT_INNER(a, b) a##b
#define MIST_CONCAT(a, b) MIST_CONCAT_INNER(a, b)
#define MIST_TRY_IMPL(tmp, decl, expr)                             \
  auto tmp = (expr);                                               \
  if (!tmp) return std::unexpected(std::move(tmp).error());        \
  decl = std::move(*tmp)
#define MIST_TRY(decl, expr) MIST_TRY_IMPL(MIST_CONCAT(mist_try_, __LINE__), decl, expr)
// Propagates the error of a Result<void>: MIST_CHECK(validate(...));
#define MIST_CHECK(expr)                                                           \
  do {                                                                             \
    auto mist_check_ = (expr);                                                     \
    if (!mist_check_) return std::unexpected(std::move(mist_check_).error());     \
  } while (0)
