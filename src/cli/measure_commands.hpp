// The measuring commands, `mist validate` and `mist profile --db F ...`, which run LibTorch. Their
// code runs in an executable of its own, mist-measure (docs/cli.md, "Measuring commands"): loading
// LibTorch maps about 300 shared libraries and takes most of a second, which every other command
// of `mist` would pay. `mist` registers the same options (so `--help` and usage errors stay its
// own), then hands the command line to mist-measure unchanged.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cli/command.hpp"

namespace mist::cli {

struct ValidateArgs {
  bool quick = false, json = false, verbose = false, strict = false, wall_clock = false;
  int reps = -1;  // -1: 3 with --quick, else 5
  int threads = 1;
  std::string timings, profile_db;
};

struct ProfileArgs {
  std::string db, model, training, csv;
  bool quick = false, wall_clock = false;
  int64_t micro_batch = 1;
  int reps = 5, threads = 1;
  std::vector<std::string> files;  // import
};

// Both executables parse with these (measure_options.cpp): adds the subcommand and its options.
CLI::App* add_validate_options(CLI::App& app, ValidateArgs& a);
CLI::App* add_profile_options(CLI::App& app, ProfileArgs& a);  // `profile` without `import`

// mist's side: `validate` and the measuring `profile` run `args` (the whole command line) in
// mist-measure; `profile import` runs here.
std::vector<Command> add_validate_command(CLI::App& app, const std::vector<std::string>& args);
std::vector<Command> add_profile_command(CLI::App& app, const std::vector<std::string>& args);

// mist-measure's side (links LibTorch): the commands themselves, and its command line.
int validate(const ValidateArgs& a, std::string& out, std::string& err);
int measure_profile(const ProfileArgs& a, std::string& out, std::string& err);
int run_measure(const std::vector<std::string>& args, std::string& out, std::string& err);

}  // namespace mist::cli
