#include "profile/database.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include "profile/csv_rows.hpp"

namespace mist::profile {
namespace {

Measurement row(std::string op, double median, std::string device = "cpu") {
  return {device, op, "b=1;s=128;h=256;a=4;g=4;f=1024;t=1", "fp32", "forward", "linear", median, 0.9 * median,
          1.2 * median, 5, "test", "2026-11-30"};
}

std::string temp_path(const char* name) {
  // The process id keeps concurrent runs of this suite (build/ and build-asan/) apart.
  return (std::filesystem::temp_directory_path() / ("mist-" + std::to_string(::getpid()) + "-" + name)).string();
}

TEST(Database, InMemoryUpsertFindAndReplace) {
  auto db = Database::open(":memory:");
  ASSERT_TRUE(db) << db.error().to_string();
  ASSERT_TRUE(db->upsert({row("attn.qkv", 1e-3), row("mlp.fc1", 2e-3)}));
  EXPECT_EQ(*db->count(), 2);
  auto hit = db->find("cpu", "attn.qkv", row("x", 1).shape, "fp32", "forward");
  ASSERT_TRUE(hit && *hit);
  EXPECT_EQ(**hit, row("attn.qkv", 1e-3));
  // Same key: replaced, not duplicated.
  ASSERT_TRUE(db->upsert({row("attn.qkv", 3e-3)}));
  EXPECT_EQ(*db->count(), 2);
  EXPECT_DOUBLE_EQ((*db->find("cpu", "attn.qkv", row("x", 1).shape, "fp32", "forward"))->median_s, 3e-3);
  // Any part of the key differing misses.
  EXPECT_FALSE(*db->find("cpu", "attn.qkv", row("x", 1).shape, "bf16", "forward"));
  EXPECT_FALSE(*db->find("cpu", "attn.qkv", row("x", 1).shape, "fp32", "backward"));
  EXPECT_FALSE(*db->find("H100-SXM5-80GB", "attn.qkv", row("x", 1).shape, "fp32", "forward"));
}

TEST(Database, FilePersistsAcrossOpens) {
  const auto path = temp_path("persist.db");
  std::filesystem::remove(path);
  {
    auto db = Database::open(path);
    ASSERT_TRUE(db) << db.error().to_string();
    ASSERT_TRUE(db->upsert({row("attn.qkv", 1e-3), row("mlp.fc1", 2e-3, "A100-SXM4-80GB")}));
  }
  auto db = Database::open(path);
  ASSERT_TRUE(db);
  auto all = db->all();
  ASSERT_TRUE(all);
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].device, "A100-SXM4-80GB");  // sorted by key
  std::filesystem::remove(path);
}

TEST(Database, RefusesOtherSchemaVersionsAndOtherFiles) {
  const auto path = temp_path("version.db");
  std::filesystem::remove(path);
  {
    ASSERT_TRUE(Database::open(path));
  }
  // Rewrite the version as a future mist would.
  {
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &raw), SQLITE_OK);
    EXPECT_EQ(sqlite3_exec(raw, "UPDATE meta SET value = '99' WHERE key = 'schema_version'", nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(raw);
  }
  auto db = Database::open(path);
  ASSERT_FALSE(db);
  EXPECT_EQ(db.error().path, "profile_db");
  EXPECT_NE(db.error().message.find("schema version 99"), std::string::npos) << db.error().message;
  std::filesystem::remove(path);
  const auto text = temp_path("not-a-db.db");
  std::ofstream(text) << "this is not an SQLite file, it is long enough to have a header page of sorts...........\n";
  auto bad = Database::open(text);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("not a mist profile database"), std::string::npos) << bad.error().message;
  std::filesystem::remove(text);
}

TEST(Database, UpsertValidatesEveryRowAndWritesNoneOnError) {
  auto db = Database::open(":memory:");
  ASSERT_TRUE(db);
  auto bad = row("mlp.fc2", NAN);
  auto r = db->upsert({row("attn.qkv", 1e-3), bad});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().path, "rows[1].median_s");
  EXPECT_EQ(*db->count(), 0);
}

TEST(Validate, NamesTheField) {
  auto expect = [](Measurement m, const char* field) {
    auto r = validate(m);
    ASSERT_FALSE(r) << field;
    EXPECT_EQ(r.error().path, field);
  };
  auto m = row("attn.qkv", 1e-3);
  ASSERT_TRUE(validate(m));
  auto x = m; x.median_s = INFINITY; expect(x, "median_s");
  x = m; x.median_s = -1e-3; expect(x, "median_s");
  x = m; x.median_s = 0; expect(x, "median_s");
  x = m; x.p10_s = 2e-3; expect(x, "p10_s");
  x = m; x.p90_s = 0.5e-3; expect(x, "p90_s");
  x = m; x.reps = 0; expect(x, "reps");
  x = m; x.pass = "sideways"; expect(x, "pass");
  x = m; x.dtype = "fp64"; expect(x, "dtype");
  x = m; x.device = ""; expect(x, "device");
  x = m; x.source = "a, b"; expect(x, "source");
}

// fuzz/regressions/profile_csv/: a NUL in a key used to reach SQLite, which cut the key there.
TEST(ProfileDatabase, RefusesNulInTextFields) {
  auto m = row("attn.qkv", 1e-3);
  for (std::string Measurement::*field : {&Measurement::device, &Measurement::op, &Measurement::shape,
                                          &Measurement::kind, &Measurement::source, &Measurement::date}) {
    auto x = m;
    (x.*field) += std::string(1, '\0') + "tail";
    auto r = validate(x);
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().message.find("NUL"), std::string::npos) << r.error().to_string();
  }
}

TEST(Csv, RoundTripsAndIgnoresExtraColumns) {
  const auto a = row("attn.qkv", 1.25e-3), b = row("mlp.fc1", 2.5e-4, "H100-SXM5-80GB");
  const std::string text = std::string("case,") + kCsvHeader + "\nx," + csv_line(a) + "\ny," + csv_line(b) + "\n";
  auto rows = parse_csv(text);
  ASSERT_TRUE(rows) << rows.error().to_string();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0], a);
  EXPECT_EQ((*rows)[1], b);
}

TEST(Csv, BadRowsNameLineAndColumn) {
  auto line = [](std::string s) { return std::string(kCsvHeader) + "\n" + csv_line(row("attn.qkv", 1e-3)) + "\n" + s; };
  auto expect = [&](const std::string& text, const char* path, const char* words) {
    auto r = parse_csv(text);
    ASSERT_FALSE(r) << path;
    EXPECT_EQ(r.error().path, path);
    EXPECT_NE(r.error().message.find(words), std::string::npos) << r.error().message;
  };
  const auto shape = row("x", 1).shape;
  expect(line("cpu,mlp.fc1,linear," + shape + ",fp32,forward,nan,1e-3,2e-3,5,t,d\n"), "line 3.median_s", "finite");
  expect(line("cpu,mlp.fc1,linear," + shape + ",fp32,forward,inf,1e-3,2e-3,5,t,d\n"), "line 3.median_s", "finite");
  expect(line("cpu,mlp.fc1,linear," + shape + ",fp32,forward,-1,-2,2e-3,5,t,d\n"), "line 3.median_s", "> 0");
  expect(line("cpu,mlp.fc1,linear," + shape + ",fp32,forward,1e-3,1e-3,2e-3,0,t,d\n"), "line 3.reps", "at least 1");
  expect(line("cpu,mlp.fc1,linear," + shape + ",fp32,forward,1e-3,1e-3,2e-3,2.5,t,d\n"), "line 3.reps", "whole number");
  expect(line("cpu,mlp.fc1,linear," + shape + ",fp32,forward,fast,1e-3,2e-3,5,t,d\n"), "line 3.median_s", "number");
  expect(line("cpu,mlp.fc1,linear\n"), "line 3", "3 fields");
  expect("device,op\ncpu,x\n", "line 1", "lacks column 'kind'");
  expect("", "line 1", "no header");
}

}  // namespace
}  // namespace mist::profile
