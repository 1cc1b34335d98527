#include "cli/commands.hpp"

#include <algorithm>
#include <cstdio>
#include <exception>

#include <fmt/format.h>

#include "cli/command.hpp"
#include "cli/measure_commands.hpp"
#include "core/json_fields.hpp"

namespace mist::cli {

int main_of(int argc, char** argv, RunFn run) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string out, err;
  int code = kExitInternal;
  try {
    code = run(args, out, err);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mist: internal error: %s\n", e.what());
    return kExitInternal;
  }
  std::fputs(out.c_str(), stdout);
  std::fputs(err.c_str(), stderr);
  return code;
}

std::optional<int> parse_args(CLI::App& app, const std::vector<std::string>& args, std::string& out,
                              std::string& err) {
  std::vector<std::string> argv = args;
  std::reverse(argv.begin(), argv.end());  // CLI11 parses a reversed vector
  try {
    app.parse(argv);
  } catch (const CLI::CallForHelp&) {
    // `mist predict --help` arrives here too: show the help of the subcommand that was named.
    const auto subs = app.get_subcommands();
    out = subs.empty() ? app.help() : subs.back()->help();
    return kExitOk;
  } catch (const CLI::CallForAllHelp&) {
    out = app.help("", CLI::AppFormatMode::All);
    return kExitOk;
  } catch (const CLI::CallForVersion& e) {
    out = std::string(e.what()) + "\n";  // the text of app.set_version_flag
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    err = fmt::format("mist: {}\nRun 'mist --help' (or 'mist <command> --help') for usage.\n", e.what());
    return kExitInvalidInput;
  }
  return std::nullopt;
}

int run(const std::vector<std::string>& args, std::string& out, std::string& err) {
  CLI::App app{
      "mist: plans and predicts distributed LLM training.\n"
      "Predicts the per-GPU memory of every pipeline stage of a plan, term by term."};
  app.name("mist");
  app.require_subcommand(1);
  app.set_version_flag("--version", "mist 0.1.0");

  // Every subcommand, in the order `mist --help` lists them.
  std::vector<Command> commands;
  for (auto add : {add_predict_commands, add_tune_command, add_gpus_command, add_list_command, add_export_commands,
                   add_simulate_command})
    for (auto& c : add(app)) commands.push_back(std::move(c));
  // Registered whether or not LibTorch was built: they parse here and run in mist-measure.
  for (auto& c : add_validate_command(app, args)) commands.push_back(std::move(c));
  for (auto& c : add_profile_command(app, args)) commands.push_back(std::move(c));
  for (auto& c : add_fit_command(app)) commands.push_back(std::move(c));

  // CLI11 would only say "A subcommand is required" for `mist frobnicate`; name the word instead.
  if (!args.empty() && !args[0].empty() && args[0][0] != '-') {
    std::vector<std::string> names;
    for (const auto& c : commands) names.push_back(c.app->get_name());
    if (std::find(names.begin(), names.end(), args[0]) == names.end()) {
      err = fmt::format("mist: unknown command '{}' (commands: {})\nRun 'mist --help' for usage.\n", args[0],
                        join(names));
      return kExitInvalidInput;
    }
  }
  if (auto done = parse_args(app, args, out, err)) return *done;
  for (const auto& c : commands)
    if (c.app->parsed()) return c.run(out, err);
  err = "mist: no command given; run 'mist --help'\n";
  return kExitInvalidInput;
}

}  // namespace mist::cli
