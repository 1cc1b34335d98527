// Recorded outputs of `mist` on fixed jobs: predict, simulate, tune, gpus, export and fit, as a user
// runs them (in-process, through cli::run). Recorded before the architecture step of issue 14
// (one prepared job, one prediction) so that the step provably changes no output; it stays as a
// guard for every later refactor. Outputs compare number by number to 1e-9 relative (a change in
// the order of floating-point operations is not a change of behaviour), text exactly; timings are
// left out. Run with MIST_GOLDEN_RECORD=1 to write expected/<case>.json anew, and read the diff.
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "calibration/published_runs.hpp"
#include "cli/commands.hpp"
#include "../common/sanitized.hpp"
#include "core/json_fields.hpp"
#include "plan/plan.hpp"
#include "spec/cluster.hpp"
#include "spec/model.hpp"
#include "spec/training.hpp"

namespace mist {
namespace {

namespace fs = std::filesystem;

const std::string kSource = MIST_SOURCE_DIR;
const fs::path kGolden = fs::path(MIST_TEST_DATA_DIR) / "golden";

// Keys whose values are timings of this run, not outputs of the model.
const char* const kTimingKeys[] = {"seconds", "tune_seconds", "date"};

struct Case {
  std::string name;
  Json spec;
};

std::vector<Case> load_cases() {
  std::ifstream in(kGolden / "cases.json");
  std::vector<Case> out;
  if (!in) return out;
  const Json j = Json::parse(in);
  for (const auto& c : j.at("cases")) out.push_back({c.at("name").get<std::string>(), c});
  return out;
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  if (from.empty()) return;
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

std::string substitute(std::string s, const fs::path& tmp) {
  replace_all(s, "{jobs}", (kGolden / "jobs").string());
  replace_all(s, "{src}", kSource);
  replace_all(s, "{tmp}", tmp.string());
  return s;
}

Json substitute(Json j, const fs::path& tmp) {
  if (j.is_string()) return substitute(j.get<std::string>(), tmp);
  if (j.is_array() || j.is_object())
    for (auto it = j.begin(); it != j.end(); ++it) it.value() = substitute(it.value(), tmp);
  return j;
}

void write_json(const fs::path& p, const Json& j) { std::ofstream(p) << j.dump(1) << "\n"; }

// The job of a published run as the four files a user would give (`{model}` ... `{plan}`).
void materialise_published(const Json& src, const fs::path& tmp) {
  auto runs = calibration::load_published_runs(kSource + "/" + src.at("file").get<std::string>());
  ASSERT_TRUE(runs.has_value()) << runs.error().to_string();
  const auto& r = runs->runs.at(src.at("run").get<size_t>());
  Json cluster = spec::cluster_to_json(r.job.cluster);
  if (src.contains("cluster")) {
    const Json extra = substitute(src.at("cluster"), tmp);
    for (auto it = extra.begin(); it != extra.end(); ++it) cluster[it.key()] = it.value();
  }
  write_json(tmp / "model.json", spec::model_to_json(r.job.model));
  write_json(tmp / "cluster.json", cluster);
  write_json(tmp / "training.json", spec::training_to_json(r.job.training));
  write_json(tmp / "plan.json", plan::plan_to_json(r.job.plan));
}

std::vector<std::string> args_of(const Json& list, const fs::path& tmp) {
  std::vector<std::string> a;
  for (const auto& x : list) {
    std::string s = substitute(x.get<std::string>(), tmp);
    replace_all(s, "{model}", (tmp / "model.json").string());
    replace_all(s, "{cluster}", (tmp / "cluster.json").string());
    replace_all(s, "{training}", (tmp / "training.json").string());
    replace_all(s, "{plan}", (tmp / "plan.json").string());
    a.push_back(s);
  }
  return a;
}

void strip_timings(Json& j) {
  if (j.is_object()) {
    for (const char* k : kTimingKeys) j.erase(k);
    for (auto& [k, v] : j.items()) strip_timings(v);
  } else if (j.is_array()) {
    for (auto& v : j) strip_timings(v);
  }
}

// What a run printed, with this machine's paths written as {src} and {tmp}.
Json outcome(int code, std::string out, std::string err, const fs::path& tmp) {
  for (std::string* s : {&out, &err}) {
    replace_all(*s, tmp.string(), "{tmp}");
    replace_all(*s, kSource, "{src}");
  }
  Json o = {{"code", code}};
  Json parsed = Json::parse(out, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_discarded() && (parsed.is_object() || parsed.is_array())) {
    strip_timings(parsed);
    o["stdout"] = parsed;
  } else {
    o["stdout"] = out;
  }
  if (code != 0) o["stderr"] = err;
  return o;
}

// The first place where `got` differs from `want`, or "" when they agree.
std::string difference(const Json& want, const Json& got, const std::string& path) {
  if (want.is_number() && got.is_number()) {
    const double a = want.get<double>(), b = got.get<double>();
    if (a == b || std::fabs(a - b) <= 1e-9 * std::max(std::fabs(a), std::fabs(b))) return "";
    return path + ": expected " + want.dump() + ", got " + got.dump();
  }
  if (want.type() != got.type()) return path + ": expected " + want.dump() + ", got " + got.dump();
  if (want.is_object()) {
    for (auto& [k, v] : want.items()) {
      if (!got.contains(k)) return path + "." + k + ": missing";
      if (auto d = difference(v, got.at(k), path + "." + k); !d.empty()) return d;
    }
    for (auto& [k, v] : got.items())
      if (!want.contains(k)) return path + "." + k + ": not expected (" + v.dump().substr(0, 200) + ")";
    return "";
  }
  if (want.is_array()) {
    if (want.size() != got.size())
      return path + ": expected " + std::to_string(want.size()) + " items, got " + std::to_string(got.size());
    for (size_t i = 0; i < want.size(); ++i)
      if (auto d = difference(want[i], got[i], path + "[" + std::to_string(i) + "]"); !d.empty()) return d;
    return "";
  }
  if (want != got) return path + ":\n--- expected\n" + want.dump() + "\n--- got\n" + got.dump();
  return "";
}

class Golden : public ::testing::TestWithParam<Case> {};

TEST_P(Golden, OutputIsAsRecorded) {
  const Case& c = GetParam();
  if (testing::kSanitized && c.spec.value("heavy", false)) GTEST_SKIP() << "a search: skipped under the sanitizers";
  const fs::path tmp = fs::temp_directory_path() / ("mist-golden-" + c.name + "-" + std::to_string(::getpid()));
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  if (c.spec.contains("published")) {
    materialise_published(c.spec.at("published"), tmp);
    if (HasFatalFailure()) return;
  }
  if (c.spec.contains("files"))
    for (auto it = c.spec.at("files").begin(); it != c.spec.at("files").end(); ++it)
      write_json(tmp / it.key(), substitute(it.value(), tmp));
  if (c.spec.contains("setup"))
    for (const auto& step : c.spec.at("setup")) {
      std::string out, err;
      ASSERT_EQ(cli::run(args_of(step, tmp), out, err), 0) << err;
    }
  std::string out, err;
  const int code = cli::run(args_of(c.spec.at("args"), tmp), out, err);
  const Json got = outcome(code, out, err, tmp);
  fs::remove_all(tmp);

  const fs::path expected = kGolden / "expected" / (c.name + ".json");
  if (std::getenv("MIST_GOLDEN_RECORD")) {
    fs::create_directories(expected.parent_path());
    write_json(expected, got);
    return;
  }
  std::ifstream in(expected);
  ASSERT_TRUE(in) << "no recorded output " << expected << " (MIST_GOLDEN_RECORD=1 records it)";
  const Json want = Json::parse(in);
  const std::string d = difference(want, got, "output");
  EXPECT_TRUE(d.empty()) << c.name << ": " << d;
}

std::string test_name(const ::testing::TestParamInfo<Case>& info) {
  std::string n = info.param.name;
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(Cases, Golden, ::testing::ValuesIn(load_cases()), test_name);

TEST(GoldenCases, CoverEveryCommandOnThirtyJobsOrMore) {
  const auto cases = load_cases();
  std::set<std::string> commands, jobs;
  for (const auto& c : cases) {
    commands.insert(c.spec.at("args").at(0).get<std::string>());
    jobs.insert(c.spec.contains("published") ? c.spec.at("published").dump() : c.name.substr(0, c.name.rfind('-')));
  }
  for (const char* cmd : {"predict", "simulate", "tune", "gpus", "export", "fit"})
    EXPECT_TRUE(commands.count(cmd)) << cmd;
  EXPECT_GE(jobs.size(), 30u);
}

}  // namespace
}  // namespace mist
