// How subcommands plug into `mist`: each one adds itself to the CLI11 app and returns the
// function that runs it once parsed. commands.cpp lists them.
#pragma once

#include <functional>
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
