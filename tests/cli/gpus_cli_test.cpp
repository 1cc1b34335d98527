// `mist gpus` through the command line: JSON fields, text table, bad input.
#include "run_mist.hpp"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace mist::cli {
namespace {

namespace fs = std::filesystem;
using testing::mist;

std::string temp_file(const std::string& name, const std::string& text) {
  const fs::path dir = testing::scratch_dir("gpus-cli");
  fs::path p = dir / name;
  std::ofstream(p) << text;
  return p.string();
}

std::string small_training() {
  return temp_file("training.json",
                   R"({"global_batch_size": 16, "seq_length": 1024, "precision": "bf16", "flash_attention": true})");
}

// A small job over the DeepSpeed space (data parallel only: the fewest layouts) so each cell
// tunes in a fraction of a second, and in seconds under the sanitizers.
std::vector<std::string> small_job(std::vector<std::string> extra) {
  std::vector<std::string> args = {"gpus",    "--model", "gpt3-1.3b", "--training", small_training(),
                                   "--space", "deepspeed"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// Measured op times are given once for every cell; a database that cannot be read is refused
// before any tuning, naming the option.
TEST(GpusCli, UnreadableProfileDatabaseIsRefusedNamingTheOption) {
  auto o = mist(small_job({"--candidates", "A100-SXM4-80GB", "--gpus", "1", "--profile-db",
                           temp_file("not_a_database.db", "this is not SQLite")}));
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find("--profile-db"), std::string::npos) << o.err;
}

TEST(GpusCli, JsonRowsCarryTheDocumentedFields) {
  auto o = mist(small_job({"--candidates", "A100-SXM4-80GB,V100-SXM2-32GB,H100-SXM5-96GB", "--gpus", "1,2",
                           "--tokens", "1e9", "--json"}));
  ASSERT_EQ(o.code, kExitOk) << o.err;
  auto j = nlohmann::json::parse(o.out);
  ASSERT_EQ(j["rows"].size(), 6u);
  bool seen_infeasible = false, seen_unpriced = false;
  for (const auto& r : j["rows"]) {
    for (const char* key : {"gpu", "num_gpus", "feasible", "tokens_per_s", "mfu", "cost_per_million_tokens", "plan",
                            "pareto", "price", "total_cost", "cost_per_hour", "pcie_only_network"})
      EXPECT_TRUE(r.contains(key)) << key << " missing in " << r.dump();
    if (!r["feasible"].get<bool>()) {
      seen_infeasible = true;
      EXPECT_TRUE(r.contains("shortfall_bytes"));
      EXPECT_NE(r["reason"].get<std::string>().find("bf16"), std::string::npos) << r.dump();  // V100
      EXPECT_TRUE(r["cost_per_million_tokens"].is_null());
    } else if (r["price"].is_null()) {
      seen_unpriced = true;  // no built-in price for the H100 96GB
      EXPECT_TRUE(r["total_cost"].is_null());
      EXPECT_GT(r["tokens_per_s"].get<double>(), 0);
    } else {
      EXPECT_TRUE(r["price"].contains("source"));
      // The built-in A100 80GB price is AWS p4de.24xlarge's ÷ 8.
      EXPECT_EQ(r["price"]["gpus_per_instance"], 8) << r.dump();
      EXPECT_NE(r["price"]["instance"].get<std::string>().find("p4de.24xlarge"), std::string::npos) << r.dump();
    }
    EXPECT_TRUE(r["pcie_only_network"].is_null()) << r.dump();  // one node, NVLink GPUs
  }
  EXPECT_TRUE(seen_infeasible);
  EXPECT_TRUE(seen_unpriced);
  EXPECT_EQ(j["smallest_fitting"]["A100-SXM4-80GB"], 1);
  // Infeasible rows come last.
  EXPECT_FALSE(j["rows"].back()["feasible"].get<bool>());
}

TEST(GpusCli, APricesFileGivesCostsAndTheParetoSet) {
  auto prices = temp_file("prices.json", R"([
    {"gpu": "A100-SXM4-80GB", "usd_per_gpu_hour": 2.0, "date": "2026-11-30", "source": "test quote"},
    {"gpu": "H200-SXM-141GB", "usd_per_gpu_hour": 5.0, "date": "2026-11-30", "source": "test quote"}])");
  auto o = mist(small_job({"--candidates", "A100-SXM4-80GB,H200-SXM-141GB", "--gpus", "1,2", "--tokens", "1e9",
                           "--prices", prices, "--json"}));
  ASSERT_EQ(o.code, kExitOk) << o.err;
  auto j = nlohmann::json::parse(o.out);
  double last = 0;
  int on_set = 0;
  for (const auto& r : j["rows"]) {
    ASSERT_TRUE(r["feasible"].get<bool>()) << r.dump();
    const double price = r["price"]["usd_per_gpu_hour"].get<double>();
    const double hours = r["time_to_train_s"].get<double>() / 3600;
    EXPECT_DOUBLE_EQ(r["total_cost"].get<double>(), hours * price * r["num_gpus"].get<double>());
    EXPECT_GE(r["total_cost"].get<double>(), last);  // sorted by cost to finish
    last = r["total_cost"].get<double>();
    on_set += r["pareto"].get<bool>();
  }
  EXPECT_GE(on_set, 1);
  EXPECT_TRUE(j["rows"][0]["pareto"].get<bool>());  // the cheapest is never dominated
  // The text form says the same.
  auto text = mist(small_job({"--candidates", "H100-SXM5-96GB,L4-24GB", "--gpus", "1", "--tokens", "1e9"}));
  ASSERT_EQ(text.code, kExitOk) << text.err;
  EXPECT_NE(text.out.find("no price"), std::string::npos) << text.out;  // the H100 96GB has no built-in price
  EXPECT_NE(text.out.find("smallest count that fits"), std::string::npos) << text.out;
}

TEST(GpusCli, BadInputExitsTwoNamingTheField) {
  auto expect_invalid = [](std::vector<std::string> extra, const std::string& says) {
    auto o = mist(small_job(std::move(extra)));
    EXPECT_EQ(o.code, kExitInvalidInput) << o.out;
    EXPECT_NE(o.err.find(says), std::string::npos) << o.err;
  };
  expect_invalid({"--candidates", "H100-SXM"}, "H100-SXM5-80GB");  // close names listed
  // A name that is part of catalog names suggests those (issue 18: "H100" suggested L4, A10G, L40S).
  expect_invalid({"--candidates", "H100"}, "(closest: H100-SXM5-80GB, H100-SXM5-96GB, H100-PCIe-80GB;");
  expect_invalid({"--candidates", "a100-80gb"}, "(closest: A100-SXM4-80GB,");
  // A folder given as a file: the option and the cause, not "malformed JSON ... end of input".
  const std::string folder = testing::scratch_dir("gpus-cli-folder").string();
  for (const char* option : {"--training", "--prices"}) {
    std::vector<std::string> args = {"gpus", "--model", "gpt3-1.3b", "--training", small_training(),
                                     "--candidates", "L4-24GB", "--space", "deepspeed"};
    if (std::string(option) == "--training") args[4] = folder;
    else args.insert(args.end(), {"--prices", folder});
    auto o = mist(args);
    EXPECT_EQ(o.code, kExitInvalidInput) << o.out;
    EXPECT_NE(o.err.find(std::string(option) + ": " + folder + ": is a directory"), std::string::npos) << o.err;
  }
  // A batch beyond 64-bit integers is out of range, named as written.
  auto huge = temp_file("huge.json", R"({"global_batch_size": 18446744073709551617, "seq_length": 1024})");
  auto o = mist({"gpus", "--model", "gpt3-1.3b", "--training", huge, "--candidates", "L4-24GB"});
  EXPECT_EQ(o.code, kExitInvalidInput) << o.out;
  EXPECT_NE(o.err.find("training.global_batch_size: out of range"), std::string::npos) << o.err;
  expect_invalid({"--candidates", ","}, "--candidates");
  expect_invalid({"--candidates", "L4-24GB", "--gpus", "0"}, "--gpus");
  expect_invalid({"--candidates", "L4-24GB", "--gpus", "-8"}, "--gpus");
  expect_invalid({"--candidates", "H100-SXM5-80GB", "--gpus", "12"}, "whole nodes");
  expect_invalid({"--candidates", "H100-SXM5-80GB", "--gpus", "12", "--gpus-per-node", "0"}, "--gpus-per-node");
  expect_invalid({"--candidates", "L4-24GB", "--tokens", "0"}, "--tokens");
  expect_invalid({"--candidates", "L4-24GB", "--tokens", "-1e12"}, "--tokens");
  auto negative = temp_file("neg.json", R"([{"gpu": "L4-24GB", "usd_per_gpu_hour": -1, "date": "2026-11-30",
                                           "source": "x"}])");
  expect_invalid({"--candidates", "L4-24GB", "--prices", negative}, "prices[0].usd_per_gpu_hour");
  auto missing = temp_file("missing.json", R"([{"gpu": "L4-24GB", "usd_per_gpu_hour": 1, "source": "x"}])");
  expect_invalid({"--candidates", "L4-24GB", "--prices", missing}, "prices[0].date");
  auto nan = temp_file("nan.json", R"([{"gpu": "L4-24GB", "usd_per_gpu_hour": NaN, "date": "2026-11-30"}])");
  expect_invalid({"--candidates", "L4-24GB", "--prices", nan}, "nan.json");
  expect_invalid({"--candidates", "L4-24GB", "--prices", "/nonexistent/prices.json"}, "prices.json");
}

// Issue 18: several nodes of PCIe-only GPUs are flagged with what the network does, in JSON and
// text; one node, or NVLink GPUs, are not.
TEST(GpusCli, MultiNodePcieOnlyRowsSayWhatTheNetworkDoes) {
  auto o = mist(small_job({"--candidates", "L40S-48GB,A100-SXM4-80GB", "--gpus", "8,16", "--tokens", "1e9", "--json"}));
  ASSERT_EQ(o.code, kExitOk) << o.err;
  int flagged = 0;
  const auto j = nlohmann::json::parse(o.out);
  for (const auto& r : j["rows"]) {
    const bool expect = r["gpu"] == "L40S-48GB" && r["nodes"].get<int>() > 1;
    ASSERT_EQ(!r["pcie_only_network"].is_null(), expect) << r.dump();
    if (!expect) continue;
    ++flagged;
    const auto& n = r["pcie_only_network"];
    EXPECT_DOUBLE_EQ(n["inter_node_GBps_per_gpu"].get<double>(), 6.25);  // g6e.48xlarge: 400 Gb/s per 8 GPUs
    EXPECT_DOUBLE_EQ(n["pcie_GBps_per_gpu"].get<double>(), 31);  // PCIe Gen4 x16 (spec::pcie_x16_bw)
    if (r["feasible"].get<bool>()) {
      EXPECT_GE(n["exposed_tail_share"].get<double>(), 0);
      EXPECT_LT(n["exposed_tail_share"].get<double>(), 1);
    }
  }
  EXPECT_EQ(flagged, 1);
  auto text = mist(small_job({"--candidates", "L40S-48GB", "--gpus", "8,16", "--tokens", "1e9"}));
  ASSERT_EQ(text.code, kExitOk) << text.err;
  EXPECT_NE(text.out.find("[PCIe only"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("cross the NIC at 6.25 GB/s per GPU"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("AWS g6e.48xlarge, 8-GPU instance"), std::string::npos) << text.out;
}

TEST(GpusCli, NothingFitsExitsThree) {
  auto o = mist({"gpus", "--model", "llama2-70b", "--training", small_training(), "--space", "megatron",
                 "--candidates", "L4-24GB", "--gpus", "1", "--json"});
  EXPECT_EQ(o.code, kExitNoFit) << o.err;
  auto j = nlohmann::json::parse(o.out);
  ASSERT_EQ(j["rows"].size(), 1u);
  EXPECT_FALSE(j["rows"][0]["feasible"].get<bool>());
  EXPECT_GT(j["rows"][0]["shortfall_bytes"].get<double>(), 0);
}

}  // namespace
}  // namespace mist::cli
