// `mist profile import` and the profile_db field of a cluster file, through the command line.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <unistd.h>

#include "core/json_fields.hpp"
#include "profile/csv_rows.hpp"
#include "profile/database.hpp"
#include "run_mist.hpp"

namespace mist::cli::testing {
namespace {

namespace fs = std::filesystem;
using mist::Json;

struct TempDir {
  fs::path dir = fs::temp_directory_path() / ("mist-profile-cli-" + std::to_string(::getpid()));
  TempDir() { fs::create_directories(dir); }
  ~TempDir() { fs::remove_all(dir); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(dir / name) << text;
    return (dir / name).string();
  }
};

// A block of GPT-3 13B with the example plan's micro-batch 2 and tp 4.
const std::string kShape = "b=2;s=2048;h=5120;a=40;g=40;f=20480;t=4";

std::string csv_row(const std::string& op, const std::string& median) {
  return "A100-SXM4-80GB," + op + ",linear," + kShape + ",bf16,forward," + median + "," + median + "," + median +
         ",3,test,2026-11-30\n";
}

TEST(ProfileImport, ImportsRowsAndRefusesBadOnesNamingLineAndColumn) {
  TempDir t;
  const auto db = (t.dir / "p.db").string();
  const auto good = t.write("good.csv", std::string(profile::kCsvHeader) + "\n" + csv_row("attn.qkv", "0.001") +
                                            csv_row("mlp.fc1", "0.002"));
  auto r = mist({"profile", "import", "--db", db, good});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("imported 2 rows"), std::string::npos) << r.out;
  EXPECT_EQ(*profile::Database::open(db)->count(), 2);

  const auto bad = t.write("bad.csv", std::string(profile::kCsvHeader) + "\n" + csv_row("attn.proj", "0.001") +
                                          csv_row("mlp.fc2", "nan"));
  r = mist({"profile", "import", "--db", db, bad});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("line 3.median_s"), std::string::npos) << r.err;
  EXPECT_EQ(*profile::Database::open(db)->count(), 2);  // nothing of bad.csv was written

  r = mist({"profile", "import", "--db", db, (t.dir / "missing.csv").string()});
  EXPECT_EQ(r.code, 2);
}

TEST(ProfileDb, PredictUsesTheDatabaseAndRefusesAMissingOne) {
  TempDir t;
  const auto cluster = [&](const std::string& db) {
    return t.write("cluster.json", R"({"gpu": "A100-SXM4-80GB", "nodes": 2, "gpus_per_node": 8, "profile_db": ")" +
                                       db + "\"}");
  };
  const auto plan = kExamples + "plan_gpt13b_2x8.json", training = kExamples + "training_gpt.json";
  auto base = mist({"predict", "--model", "gpt3-13b", "--cluster", kExamples + "cluster_2x8_a100.json",
                    "--training", training, "--plan", plan, "--json"});
  ASSERT_EQ(base.code, 0) << base.err;

  auto missing = mist({"predict", "--model", "gpt3-13b", "--cluster", cluster("nowhere.db"), "--training", training,
                       "--plan", plan});
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.err.find("cluster.profile_db"), std::string::npos) << missing.err;

  // An empty database changes nothing.
  ASSERT_TRUE(profile::Database::open((t.dir / "empty.db").string()));
  auto empty = mist({"predict", "--model", "gpt3-13b", "--cluster", cluster("empty.db"), "--training", training,
                     "--plan", plan, "--json"});
  ASSERT_EQ(empty.code, 0) << empty.err;
  EXPECT_EQ(Json::parse(empty.out)["iteration_time_s"], Json::parse(base.out)["iteration_time_s"]);

  // A slow measured mlp.fc1 on this device (one per block, 40 blocks, 128 micro-batches) shows.
  const auto rows = t.write("rows.csv", std::string(profile::kCsvHeader) + "\n" + csv_row("mlp.fc1", "0.01"));
  ASSERT_EQ(mist({"profile", "import", "--db", (t.dir / "slow.db").string(), rows}).code, 0);
  auto slow = mist({"predict", "--model", "gpt3-13b", "--cluster", cluster("slow.db"), "--training", training,
                    "--plan", plan, "--json"});
  ASSERT_EQ(slow.code, 0) << slow.err;
  const double dt = Json::parse(slow.out)["iteration_time_s"].get<double>() -
                    Json::parse(base.out)["iteration_time_s"].get<double>();
  EXPECT_GT(dt, 0.5 * 128 * 20 * 0.01);  // the slowest stage's 20 blocks, every micro-batch
  EXPECT_LT(dt, 1.0 * 128 * 40 * 0.01);
  // The sources are counted: one op's forward measured, the rest analytical; explain says so.
  const auto sources = Json::parse(slow.out)["op_time_sources"];
  EXPECT_EQ(sources["exact"], 1);
  EXPECT_EQ(sources["scaled"], 0);
  EXPECT_GT(sources["analytical"].get<int>(), 10);
  EXPECT_EQ(Json::parse(base.out)["op_time_sources"]["exact"], 0);
  auto explain = mist({"explain", "--model", "gpt3-13b", "--cluster", cluster("slow.db"), "--training", training,
                       "--plan", plan});
  ASSERT_EQ(explain.code, 0) << explain.err;
  EXPECT_NE(explain.out.find("op times: 1 measured on this device, 0 scaled"), std::string::npos);

  // On an H100 the A100 row is scaled (the H100 is faster: the change is smaller than on the A100).
  const auto h100 = t.write("h100.json", R"({"gpu": "H100-SXM5-80GB", "nodes": 2, "gpus_per_node": 8, "profile_db": "slow.db"})");
  auto scaled = mist({"predict", "--model", "gpt3-13b", "--cluster", h100, "--training", training, "--plan", plan, "--json"});
  ASSERT_EQ(scaled.code, 0) << scaled.err;
  EXPECT_EQ(Json::parse(scaled.out)["op_time_sources"]["scaled"], 1);
  EXPECT_EQ(Json::parse(scaled.out)["op_time_sources"]["exact"], 0);
}

}  // namespace
}  // namespace mist::cli::testing
