// The `mist` command line: parses arguments, loads the job, calls the libraries, prints.
#pragma once

#include <string>
#include <vector>

namespace mist::cli {

// Exit statuses (docs/cli.md): 0 success, 1 internal error, 2 invalid input or usage, 3 nothing fits.
inline constexpr int kExitOk = 0;
inline constexpr int kExitInternal = 1;
inline constexpr int kExitInvalidInput = 2;
inline constexpr int kExitNoFit = 3;  // `mist tune`: no plan fits; the closest one is reported

// Runs the command line; output goes to `out`, diagnostics to `err`.
int run(const std::vector<std::string>& args, std::string& out, std::string& err);

// What main() of `mist` and of `mist-measure` does with a `run`: the arguments in, `out` to stdout
// and `err` to stderr, the exit status out; an exception is a bug (the libraries return errors as
// values), reported as an internal error.
using RunFn = int (*)(const std::vector<std::string>& args, std::string& out, std::string& err);
int main_of(int argc, char** argv, RunFn run);

}  // namespace mist::cli
