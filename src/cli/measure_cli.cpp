// mist-measure's command line: `validate ...` and `profile --db F ...`, as `mist` received them
// (measure_commands.hpp). `mist` has already parsed the line once, so the errors here are for a
// mist-measure run by hand; they read like mist's.
#include "cli/command.hpp"
#include "cli/commands.hpp"
#include "cli/measure_commands.hpp"

namespace mist::cli {

int run_measure(const std::vector<std::string>& args, std::string& out, std::string& err) {
  CLI::App app{"mist-measure: the measuring commands of mist (LibTorch); run them as 'mist validate' and "
               "'mist profile'"};
  app.name("mist");
  app.require_subcommand(1);
  ValidateArgs v;
  ProfileArgs p;
  auto* validate_app = add_validate_options(app, v);
  add_profile_options(app, p);
  if (auto done = parse_args(app, args, out, err)) return *done;
  return validate_app->parsed() ? validate(v, out, err) : measure_profile(p, out, err);
}

}  // namespace mist::cli
