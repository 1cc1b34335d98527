// Running the `mist` command line in-process, for the CLI tests.
#pragma once

#include <string>
#include <vector>

#include "cli/commands.hpp"

namespace mist::cli::testing {

inline const std::string kExamples = std::string(MIST_SOURCE_DIR) + "/examples/";

struct Outcome {
  int code;
  std::string out, err;
};

inline Outcome mist(const std::vector<std::string>& args) {
  Outcome o;
  o.code = run(args, o.out, o.err);
  return o;
}

}  // namespace mist::cli::testing
