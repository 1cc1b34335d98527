// mist-measure: `mist validate` and `mist profile --db F ...` run here (measure_commands.hpp says
// why); `mist` runs this executable with its own command line. Same streams and exit statuses as
// main.cpp.
#include "cli/commands.hpp"
#include "cli/measure_commands.hpp"

int main(int argc, char** argv) { return mist::cli::main_of(argc, argv, mist::cli::run_measure); }
