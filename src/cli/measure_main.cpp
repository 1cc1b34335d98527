// mist-measure: `mist validate` and `mist profile --db F ...` run here (measure_commands.hpp says
// why); `mist` runs this executable with its own command line. Same streams and exit statuses as
// main.cpp.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/measure_commands.hpp"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string out, err;
  int code = mist::cli::kExitInternal;
  try {
    code = mist::cli::run_measure(args, out, err);
  } catch (const std::exception& e) {
    // A bug, not bad input: the libraries return errors as values.
    std::fprintf(stderr, "mist: internal error: %s\n", e.what());
    return mist::cli::kExitInternal;
  }
  std::fputs(out.c_str(), stdout);
  std::fputs(err.c_str(), stderr);
  return code;
}
