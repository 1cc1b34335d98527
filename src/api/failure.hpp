// Why a command failed, in the classes the command line reports (docs/cli.md, "Exit status"), so
// that the command line and the Python module say the same thing.
#pragma once

#include <expected>
#include <string>

#include "core/result.hpp"

namespace mist::api {

struct Failure {
  enum class Kind {
    kInvalidInput,  // a field or option at fault: "invalid input: PATH: REASON" (exit 2)
    kSearch,        // the tuner refused the job (an empty search space): "PATH: REASON" (exit 2)
    kInternal,      // a bug: "internal error: ..." (exit 1)
  };
  Failure(Error e, Kind k = Kind::kInvalidInput) : error(std::move(e)), kind(k) {}  // NOLINT: from MIST_TRY

  Error error;
  Kind kind;

  // What the command line prints after "mist: " (one line, no newline).
  std::string message() const;
};

template <class T>
using Outcome = std::expected<T, Failure>;

}  // namespace mist::api
