// Running the measuring commands in mist-measure (measure_commands.hpp says why they live there):
// finding that executable, and running it with this process's standard streams.
#pragma once

#include <string>
#include <vector>

#include "core/result.hpp"

namespace mist::cli {

// $MIST_MEASURE when set (tests, a copy elsewhere), else mist-measure next to the running
// executable (/proc/self/exe: where build/mist is, the build put mist-measure).
std::string measure_executable();

struct ExitStatus {
  int code = 0;    // the exit status, when it exited
  int signal = 0;  // the signal that ended it, else 0
};

// Runs `path` with `args` (argv[0] is `path`) on this process's stdin, stdout and stderr, and
// waits for it. An error when it cannot start.
Result<ExitStatus> run_program(const std::string& path, const std::vector<std::string>& args);

// `mist <command> ...`: runs the whole command line `args` in mist-measure and returns its exit
// status; its output goes straight to this process's stdout and stderr (a full `validate` prints
// progress for minutes). Exit 2 with a message in `err` when mist-measure was not built.
int forward_to_measure(const std::string& command, const std::vector<std::string>& args, std::string& err);

}  // namespace mist::cli
