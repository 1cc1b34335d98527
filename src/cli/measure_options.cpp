// The options of `mist validate` and `mist profile`, in one place because two executables parse
// them: `mist` (for `--help` and usage errors, before it forwards the command line) and
// mist-measure (which measures). The same definitions keep the two parses the same.
#include "cli/measure_commands.hpp"

namespace mist::cli {

CLI::App* add_validate_options(CLI::App& app, ValidateArgs& a) {
  auto* v = app.add_subcommand(
      "validate", "measure transformer layers on this CPU (LibTorch) and compare with mist's memory and time model");
  v->add_flag("--quick", a.quick, "a small sweep (8 layers, seconds) instead of the full one (41 layers, minutes)");
  v->add_flag("--json", a.json, "print one JSON object instead of tables");
  v->add_flag("--strict", a.strict, "fail also where a known gap of the model explains an error (docs/validation.md)");
  v->add_flag("--verbose", a.verbose, "print each block's result to stderr as it is measured");
  v->add_option("--reps", a.reps,
                "timed forward+backward repetitions per block, op by op and then whole (default 3 quick, 5 full)")
      ->check(CLI::Range(1, 100));
  v->add_flag("--wall-clock", a.wall_clock,
              "time with the wall clock (default with one thread: the thread's CPU time, robust to a busy machine)");
  v->add_option("--threads", a.threads, "intra-op threads of LibTorch and OpenBLAS (default 1)")
      ->check(CLI::Range(1, 1024));
  v->add_option("--timings", a.timings, "write per-op wall times (profile CSV rows, docs/profile.md) to this file");
  v->add_option("--profile-db", a.profile_db,
                "also store the per-op wall times in this profile database (docs/profile.md)");
  return v;
}

CLI::App* add_profile_options(CLI::App& app, ProfileArgs& a) {
  auto* p = app.add_subcommand("profile",
                               "measure op times on this CPU (LibTorch) into a profile database, or import rows");
  p->add_option("--db", a.db, "the profile database (SQLite; created when missing)")->required();
  p->add_flag("--quick", a.quick, "the small validation sweep (8 layers) instead of the full one (41)");
  p->add_option("--model", a.model, "profile this model's block, embedding and head instead of the sweep");
  p->add_option("--training", a.training,
                "training JSON (seq_length, precision, flash_attention, dropout) for --model");
  p->add_option("--micro-batch", a.micro_batch, "micro-batch size for --model (default 1)")
      ->check(CLI::Range(1, 4096));
  p->add_option("--reps", a.reps, "timed repetitions per layer (default 5)")->check(CLI::Range(1, 100));
  p->add_option("--threads", a.threads, "intra-op threads of LibTorch and OpenBLAS (default 1)")
      ->check(CLI::Range(1, 1024));
  p->add_option("--csv", a.csv, "also write the rows to this CSV file");
  p->add_flag("--wall-clock", a.wall_clock,
              "time with the wall clock (default with one thread: the thread's CPU time, robust to a busy machine)");
  return p;
}

}  // namespace mist::cli
