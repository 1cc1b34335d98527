// How subcommands plug into `mist`: each one adds itself to the CLI11 app and returns the
// function that runs it once parsed. commands.cpp lists them.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace mist::cli {

// Runs a parsed subcommand: fills `out` (stdout) and `err` (stderr), returns the exit status.
using Runner = std::function<int(std::string& out, std::string& err)>;

struct Command {
  CLI::App* app;
  Runner run;
};

// Parses `args` into `app` as every mist executable does: a help request prints the help of the
// subcommand it names (or everything, or the version) to `out`, a parse error a usage line to `err`.
// The exit status when parsing ended the run; nullopt when the parsed command is to run.
std::optional<int> parse_args(CLI::App& app, const std::vector<std::string>& args, std::string& out,
                              std::string& err);

// One per source file (predict_command.cpp, list_command.cpp, ...).
std::vector<Command> add_predict_commands(CLI::App& app);  // predict, explain
std::vector<Command> add_list_command(CLI::App& app);      // list
std::vector<Command> add_simulate_command(CLI::App& app);  // simulate
std::vector<Command> add_tune_command(CLI::App& app);      // tune
std::vector<Command> add_export_commands(CLI::App& app);   // export, import
std::vector<Command> add_gpus_command(CLI::App& app);      // gpus
std::vector<Command> add_fit_command(CLI::App& app);       // fit
// validate and profile: measure_commands.hpp.

}  // namespace mist::cli
