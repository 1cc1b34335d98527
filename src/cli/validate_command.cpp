// `mist validate`: parsed here, so that `--help` and usage errors need no LibTorch, and run in
// mist-measure (validate_measure.cpp), which links it (measure_commands.hpp says why).
#include <memory>

#include "cli/measure_commands.hpp"
#include "cli/measure_forward.hpp"

namespace mist::cli {

std::vector<Command> add_validate_command(CLI::App& app, const std::vector<std::string>& args) {
  auto a = std::make_shared<ValidateArgs>();  // checked here; mist-measure parses the same line again
  auto* v = add_validate_options(app, *a);
  return {{v, [a, args](std::string&, std::string& err) { return forward_to_measure("validate", args, err); }}};
}

}  // namespace mist::cli
