// The `mist` command (cli/commands.hpp).
#include "cli/commands.hpp"

int main(int argc, char** argv) { return mist::cli::main_of(argc, argv, mist::cli::run); }
