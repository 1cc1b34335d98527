// `mist validate` and the measuring `mist profile`: parsed by mist, run by mist-measure
// (src/cli/measure_commands.hpp). A stand-in script as MIST_MEASURE checks what mist passes on and
// hands back (arguments, streams, exit status) in every build; the real mist-measure is exercised
// where LibTorch was built (here and by the mist_validate_quick test).
#include <sys/stat.h>
#include <sys/wait.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "cli/commands.hpp"
#include "profile/database.hpp"
#include "run_mist.hpp"

namespace mist::cli {
namespace {

namespace fs = std::filesystem;
using testing::mist;

fs::path dir() { return testing::scratch_dir("measure-cli"); }

std::string write(const std::string& name, const std::string& text, bool executable = false) {
  const auto path = dir() / name;
  std::ofstream(path) << text;
  if (executable) ::chmod(path.c_str(), 0755);
  return path.string();
}

std::string read(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Sets MIST_MEASURE for one scope (in-process runs of mist read it).
struct MeasureOverride {
  explicit MeasureOverride(const std::string& path) { ::setenv("MIST_MEASURE", path.c_str(), 1); }
  ~MeasureOverride() { ::unsetenv("MIST_MEASURE"); }
};

// The real binary with `env` before it; stdout and stderr land in files of dir().
struct Run {
  int status = -1;  // exit status, -1 when it did not exit
  std::string out, err;
};
Run binary(const std::string& env, const std::string& args) {
  const auto out = dir() / "stdout", err = dir() / "stderr";
  const std::string command = env + " " + MIST_BINARY + " " + args + " >" + out.string() + " 2>" + err.string();
  const int raw = std::system(command.c_str());
  return {WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, read(out), read(err)};
}

// Prints its arguments one per line to stdout, a line to stderr, and exits 3.
const char* kEcho = "#!/bin/sh\nfor a in \"$@\"; do echo \"[$a]\"; done\necho 'measure stderr' >&2\nexit 3\n";

TEST(MeasureCli, HelpAndUsageErrorsNeedNoMeasureExecutable) {
  MeasureOverride none("/no/such/mist-measure");
  const auto help = mist({"--help"});
  EXPECT_NE(help.out.find("validate"), std::string::npos);
  EXPECT_NE(help.out.find("profile"), std::string::npos);
  const auto v = mist({"validate", "--help"});
  EXPECT_EQ(v.code, kExitOk);
  for (const char* opt : {"--quick", "--json", "--reps", "--timings", "--profile-db", "--wall-clock"})
    EXPECT_NE(v.out.find(opt), std::string::npos) << opt;
  const auto p = mist({"profile", "--help"});
  EXPECT_EQ(p.code, kExitOk);
  for (const char* opt : {"--db", "--quick", "--model", "--training", "--csv", "import"})
    EXPECT_NE(p.out.find(opt), std::string::npos) << opt;

  const auto reps = mist({"validate", "--reps", "0"});
  EXPECT_EQ(reps.code, kExitInvalidInput);
  EXPECT_NE(reps.err.find("--reps"), std::string::npos) << reps.err;
  const auto db = mist({"profile", "--quick"});
  EXPECT_EQ(db.code, kExitInvalidInput);
  EXPECT_NE(db.err.find("--db is required"), std::string::npos) << db.err;
  const auto bogus = mist({"validate", "--bogus"});
  EXPECT_EQ(bogus.code, kExitInvalidInput);
  EXPECT_NE(bogus.err.find("--bogus"), std::string::npos) << bogus.err;
}

TEST(MeasureCli, WithoutTheMeasureExecutableExitsTwoSayingSo) {
  const std::string not_executable = write("plain-file", "not a program\n");
  for (const std::string& path : {std::string("/no/such/mist-measure"), not_executable}) {
    MeasureOverride o(path);
    for (const std::vector<std::string>& args : {std::vector<std::string>{"validate", "--quick"},
                                                 std::vector<std::string>{"profile", "--db", "x.db", "--quick"}}) {
      const auto r = mist(args);
      EXPECT_EQ(r.code, kExitInvalidInput) << path;
      EXPECT_NE(r.err.find("mist: " + args[0] + ": LibTorch measurement was not built"), std::string::npos) << r.err;
      EXPECT_NE(r.err.find("libtorch-dev"), std::string::npos) << r.err;
      EXPECT_TRUE(r.out.empty());
    }
  }
  // `profile import` runs in mist itself.
  MeasureOverride o("/no/such/mist-measure");
  const auto db = (dir() / "import.db").string();
  const auto r = mist({"profile", "import", "--db", db, std::string(MIST_TEST_DATA_DIR) + "/fit/cpu_profile_fp32.csv"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
}

TEST(MeasureCli, PassesTheCommandLineStreamsAndExitStatusThrough) {
  const std::string echo = write("echo-measure.sh", kEcho, true);
  auto r = binary("MIST_MEASURE=" + echo, "validate --quick --reps 2");
  EXPECT_EQ(r.status, 3);
  EXPECT_EQ(r.out, "[validate]\n[--quick]\n[--reps]\n[2]\n");
  EXPECT_EQ(r.err, "measure stderr\n");
  r = binary("MIST_MEASURE=" + echo, "profile --db 'a b.db' --model gpt3-13b --training t.json");
  EXPECT_EQ(r.status, 3);
  EXPECT_EQ(r.out, "[profile]\n[--db]\n[a b.db]\n[--model]\n[gpt3-13b]\n[--training]\n[t.json]\n");
  // In-process too: run() returns the child's status.
  MeasureOverride o(echo);
  EXPECT_EQ(mist({"validate"}).code, 3);

  const std::string killed = write("killed-measure.sh", "#!/bin/sh\nkill -TERM $$\n", true);
  r = binary("MIST_MEASURE=" + killed, "validate");
  EXPECT_EQ(r.status, 128 + SIGTERM);
  EXPECT_NE(r.err.find("ended by signal 15"), std::string::npos) << r.err;
}

#ifdef MIST_WITH_TORCH
// The real mist-measure, found next to build/mist: a tiny model's block, embedding and head.
TEST(MeasureCli, ProfileMeasuresThroughMistMeasure) {
  const auto model = write("tiny.json", R"({"name": "tiny", "family": "gpt", "num_layers": 2, "hidden_size": 64,
      "num_heads": 4, "ffn_hidden_size": 256, "vocab_size": 512, "max_position_embeddings": 64,
      "norm": "layernorm", "mlp": "gelu", "positions": "learned"})");
  const auto training =
      write("tiny-training.json", R"({"global_batch_size": 8, "seq_length": 32, "precision": "fp32"})");
  const auto db = dir() / "measured.db", csv = dir() / "measured.csv";
  fs::remove(db);
  const auto r = binary("", "profile --db " + db.string() + " --model " + model + " --training " + training +
                                " --reps 1 --csv " + csv.string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("tiny-block"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("stored "), std::string::npos) << r.out;
  EXPECT_GT(*profile::Database::open(db.string())->count(), 0);
  EXPECT_NE(read(csv).find(",block,"), std::string::npos);
}
#endif

}  // namespace
}  // namespace mist::cli
