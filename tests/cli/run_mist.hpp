// Running the `mist` command line in-process, for the CLI tests.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "cli/commands.hpp"

namespace mist::cli::testing {

inline const std::string kExamples = std::string(MIST_SOURCE_DIR) + "/examples/";

// A temporary folder private to this test process: ctest runs tests in parallel processes, so a
// shared fixed path lets one test truncate a file another is reading.
inline std::filesystem::path scratch_dir(const std::string& tag) {
  const auto dir = std::filesystem::temp_directory_path() / ("mist-" + tag + "-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

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
