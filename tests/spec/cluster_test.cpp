// ClusterSpec: the JSON form, defaults derived from the GPU, overrides and bad input.
#include "spec/cluster.hpp"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "../common/expect.hpp"

#include "core/units.hpp"

namespace mist::spec {
namespace {

using mist::testing::parse;
using mist::testing::expect_error;

using units::kGB;
using units::kGiB;

Result<ClusterSpec> cluster(std::string_view text) {
  return cluster_from_json(parse(text), "cluster");
}

void expect_round_trip(const ClusterSpec& c) {
  const Json j = cluster_to_json(c);
  // Through text, as a file would.
  auto back = cluster_from_json(parse(j.dump()), "cluster");
  ASSERT_TRUE(back.has_value()) << back.error().to_string() << "\n" << j.dump(2);
  EXPECT_EQ(*back, c) << j.dump(2);
}

TEST(Cluster, NvlinkDefaults) {
  auto c = cluster(R"({"gpu": "A100-SXM4-80GB", "nodes": 2})");
  ASSERT_TRUE(c.has_value()) << c.error().to_string();
  EXPECT_EQ(c->gpu.name, "A100-SXM4-80GB");
  EXPECT_EQ(c->gpus_per_node, 8);
  EXPECT_EQ(c->num_gpus(), 16);
  EXPECT_DOUBLE_EQ(c->intra_node_bw, 300 * kGB);  // NVLink, one direction
  EXPECT_DOUBLE_EQ(c->intra_node_latency, 2.4e-6);  // one ring step, fitted to measured A100 all-reduces
  EXPECT_DOUBLE_EQ(c->inter_node_bw, 25 * kGB);
  EXPECT_DOUBLE_EQ(c->inter_node_latency, 5e-6);
  EXPECT_DOUBLE_EQ(c->pcie_bw, 31 * kGB);
  EXPECT_DOUBLE_EQ(c->host_memory_bytes, 2048 * kGiB);
  EXPECT_DOUBLE_EQ(c->gpu.memory_bytes, 80 * kGiB);
}

TEST(Cluster, PcieOnlyDefaults) {
  auto c = cluster(R"({"gpu": "L4-24GB", "nodes": 4})");
  ASSERT_TRUE(c.has_value()) << c.error().to_string();
  EXPECT_EQ(c->gpus_per_node, 8);
  EXPECT_DOUBLE_EQ(c->intra_node_bw, 31 * kGB);  // no NVLink: PCIe Gen4 x16
  EXPECT_DOUBLE_EQ(c->intra_node_latency, 5e-6);
  EXPECT_DOUBLE_EQ(c->pcie_bw, 31 * kGB);
}

TEST(Cluster, ExplicitFieldsAndGpuOverrides) {
  auto c = cluster(R"({"gpu": {"name": "H100-SXM5-80GB", "memory_GiB": 64, "bf16_TFLOPS": 700,
      "link_GBps": 0}, "nodes": 3, "gpus_per_node": 4, "intra_node_GBps": 100,
      "intra_node_latency_us": 3, "inter_node_GBps": 12.5, "inter_node_latency_us": 8,
      "pcie_GBps": 50, "host_memory_GiB": 512})");
  ASSERT_TRUE(c.has_value()) << c.error().to_string();
  const GpuSpec h100 = *catalog_gpu("H100-SXM5-80GB");
  EXPECT_DOUBLE_EQ(c->gpu.memory_bytes, 64 * kGiB);
  EXPECT_DOUBLE_EQ(c->gpu.bf16_flops, 700e12);
  EXPECT_DOUBLE_EQ(c->gpu.link_bw, 0);
  EXPECT_DOUBLE_EQ(c->gpu.fp16_flops, h100.fp16_flops);  // untouched fields from the catalog
  EXPECT_EQ(c->gpu.source, h100.source);
  EXPECT_EQ(c->num_gpus(), 12);
  EXPECT_DOUBLE_EQ(c->intra_node_bw, 100 * kGB);
  EXPECT_DOUBLE_EQ(c->intra_node_latency, 3e-6);
  EXPECT_DOUBLE_EQ(c->inter_node_bw, 12.5 * kGB);
  EXPECT_DOUBLE_EQ(c->inter_node_latency, 8e-6);
  EXPECT_DOUBLE_EQ(c->pcie_bw, 50 * kGB);
  EXPECT_DOUBLE_EQ(c->host_memory_bytes, 512 * kGiB);
  expect_round_trip(*c);
}

TEST(Cluster, RoundTripsForEveryCatalogGpu) {
  for (const auto& name : gpu_catalog_names()) {
    SCOPED_TRACE(name);
    auto c = cluster_from_json(Json{{"gpu", name}, {"nodes", 2}}, "cluster");
    ASSERT_TRUE(c.has_value()) << c.error().to_string();
    expect_round_trip(*c);
  }
  // Values that do not divide evenly into the JSON units still come back bit for bit.
  ClusterSpec odd = *cluster_from_json(Json{{"gpu", "L4-24GB"}, {"nodes", 1}}, "cluster");
  odd.inter_node_bw = (0.1 + 0.2) * kGB;
  odd.intra_node_latency = 1.0 / 3.0 * 1e-6;
  odd.gpu.mem_bw = 0.7e12 / 3.0;
  odd.gpu.memory_bytes = 22.494 * kGiB + 1;
  expect_round_trip(odd);
}

TEST(Cluster, GpuOutsideTheCatalog) {
  // A complete definition is accepted, so a cluster_to_json of any GPU loads back.
  GpuSpec custom = *catalog_gpu("L40S-48GB");
  custom.name = "RTX-6000-Ada-48GB";
  custom.source = "test";
  Json j = {{"gpu", gpu_to_json(custom)}, {"nodes", 1}};
  auto c = cluster_from_json(j, "cluster");
  ASSERT_TRUE(c.has_value()) << c.error().to_string();
  EXPECT_EQ(c->gpu, custom);
  // A partial one is an unknown name.
  auto partial = cluster(R"({"gpu": {"name": "RTX-6000-Ada-48GB", "memory_GiB": 48}, "nodes": 1})");
  expect_error(partial, "cluster.gpu.name", "unknown GPU");
  EXPECT_NE(partial.error().message.find("every field"), std::string::npos);
}

TEST(Cluster, BadInput) {
  auto unknown = cluster(R"({"gpu": "A100-SXM4-81GB", "nodes": 1})");
  expect_error(unknown, "cluster.gpu", "unknown GPU");
  EXPECT_NE(unknown.error().message.find("A100-SXM4-80GB"), std::string::npos);  // lists catalog
  expect_error(cluster(R"({"gpu": 7, "nodes": 1})"), "cluster.gpu", "GPU name");
  expect_error(cluster(R"({"nodes": 1})"), "cluster.gpu", "missing");
  expect_error(cluster(R"({"gpu": "L4-24GB"})"), "cluster.nodes", "missing");
  expect_error(cluster(R"({"gpu": "L4-24GB", "nodes": 0})"), "cluster.nodes", "at least 1");
  expect_error(cluster(R"({"gpu": "L4-24GB", "nodes": "2"})"), "cluster.nodes", "integer");
  expect_error(cluster(R"({"gpu": "L4-24GB", "nodes": 1000000})"), "cluster.nodes", "at most");
  expect_error(cluster(R"({"gpu": "L4-24GB", "nodes": 1, "gpus_per_node": 65})"),
               "cluster.gpus_per_node", "at most");
  expect_error(cluster(R"({"gpu": "L4-24GB", "nodes": 1, "inter_node_GBps": -5})"),
               "cluster.inter_node_GBps", "positive");
  expect_error(cluster(R"({"gpu": "L4-24GB", "nodes": 1, "intra_node_GBps": 0})"),
               "cluster.intra_node_GBps", "positive");
  expect_error(cluster(R"({"gpu": "L4-24GB", "nodes": 1, "pcie_GBps": 1e9})"), "cluster.pcie_GBps",
               "at most");
  expect_error(cluster(R"({"gpu": "L4-24GB", "nodes": 1, "host_memory_GiB": "lots"})"),
               "cluster.host_memory_GiB", "number");
  expect_error(cluster(R"({"gpu": "L4-24GB", "nodes": 1, "node": 2})"), "cluster.node", "unknown");
  expect_error(cluster(R"({"gpu": {"name": "L4-24GB", "memory_GiB": -24}, "nodes": 1})"),
               "cluster.gpu.memory_GiB", "positive");
  expect_error(cluster(R"({"gpu": {"name": "L4-24GB", "memory_GiB": 1e9}, "nodes": 1})"),
               "cluster.gpu.memory_GiB", "at most");
  expect_error(cluster(R"({"gpu": {"name": "L4-24GB", "fp8_TFLOPS": -1}, "nodes": 1})"),
               "cluster.gpu.fp8_TFLOPS", "negative");
  expect_error(cluster(R"({"gpu": {"name": "L4-24GB", "pcie_gen": 9}, "nodes": 1})"),
               "cluster.gpu.pcie_gen", "at most");
  expect_error(cluster(R"({"gpu": {"name": "L4-24GB", "memory_GB": 24}, "nodes": 1})"),
               "cluster.gpu.memory_GB", "unknown");
  expect_error(cluster(R"({"gpu": {"memory_GiB": 24}, "nodes": 1})"), "cluster.gpu.name",
               "missing");
}

// An NVLink domain of several nodes (an NVL72 rack of 4-GPU trays, 2026-12-07): read, written back,
// and refused where the nodes cannot form it or the GPUs cannot fill it.
TEST(Cluster, NvlinkDomainOfSeveralNodes) {
  auto rack = cluster(R"({"gpu": "B200-SXM-180GB", "nodes": 16, "gpus_per_node": 4, "nvlink_domain": 64})");
  ASSERT_TRUE(rack.has_value()) << rack.error().to_string();
  EXPECT_EQ(rack->nvlink_gpus(), 64);
  EXPECT_FALSE(rack->spans_domains());
  const Json j = cluster_to_json(*rack);
  EXPECT_EQ(j["nvlink_domain"], 64);
  auto back = cluster_from_json(j, "cluster");
  ASSERT_TRUE(back.has_value()) << back.error().to_string();
  EXPECT_EQ(*back, *rack);
  // Without it the node is the domain, and the written cluster does not say it.
  auto dgx = cluster(R"({"gpu": "B200-SXM-180GB", "nodes": 2})");
  ASSERT_TRUE(dgx.has_value());
  EXPECT_EQ(dgx->nvlink_gpus(), 8);
  EXPECT_TRUE(dgx->spans_domains());
  EXPECT_FALSE(cluster_to_json(*dgx).contains("nvlink_domain"));
  expect_error(cluster(R"({"gpu": "B200-SXM-180GB", "nodes": 4, "gpus_per_node": 4, "nvlink_domain": 6})"),
               "cluster.nvlink_domain", "multiple of gpus_per_node (4)");
  // 256 GPUs over NVL72 racks: 64 in each of 4.
  auto uneven = cluster(R"({"gpu": "B200-SXM-180GB", "nodes": 64, "gpus_per_node": 4, "nvlink_domain": 72})");
  expect_error(uneven, "cluster.nvlink_domain", "do not fill whole NVLink domains of 72");
  EXPECT_NE(uneven.error().message.find("64 would make 4 domains of 64"), std::string::npos) << uneven.error().message;
  expect_error(cluster(R"({"gpu": "L40S-48GB", "nodes": 2, "gpus_per_node": 8, "nvlink_domain": 16})"),
               "cluster.nvlink_domain", "no NVLink");
  expect_error(cluster(R"({"gpu": "B200-SXM-180GB", "nodes": 1, "nvlink_domain": 0})"), "cluster.nvlink_domain",
               "at least 1");
}

// The board-power fields: a site's power limit below the TDP, refused above it or without one.
TEST(Cluster, PowerLimitBelowTheTdp) {
  auto capped = cluster(R"({"gpu": {"name": "H100-SXM5-80GB", "power_limit_W": 500}, "nodes": 1})");
  ASSERT_TRUE(capped.has_value()) << capped.error().to_string();
  EXPECT_DOUBLE_EQ(capped->gpu.tdp_watts, 700);
  EXPECT_DOUBLE_EQ(capped->gpu.power_limit_watts, 500);
  expect_error(cluster(R"({"gpu": {"name": "H100-SXM5-80GB", "power_limit_W": 800}, "nodes": 1})"),
               "cluster.gpu.power_limit_W", "above the TDP");
  expect_error(cluster(R"({"gpu": {"name": "A10G-24GB", "power_limit_W": 100}, "nodes": 1})"),
               "cluster.gpu.power_limit_W", "needs tdp_W");
  expect_error(cluster(R"({"gpu": {"name": "H100-SXM5-80GB", "idle_W": 700}, "nodes": 1})"), "cluster.gpu.idle_W",
               "not below the power limit");
  expect_error(cluster(R"({"gpu": {"name": "H100-SXM5-80GB", "tdp_W": -1}, "nodes": 1})"), "cluster.gpu.tdp_W",
               "positive");
}

TEST(Cluster, LoadFromFile) {
  const auto file = std::filesystem::temp_directory_path() / ("mist_spec_test_cluster-" + std::to_string(::getpid()) + ".json");
  std::ofstream(file) << R"({"gpu": "H200-SXM-141GB", "nodes": 4})";
  auto c = load_cluster(file.string());
  ASSERT_TRUE(c.has_value()) << c.error().to_string();
  EXPECT_EQ(c->cluster.num_gpus(), 32);
  EXPECT_TRUE(c->files.empty());
  std::ofstream(file) << R"({"gpu": "H200-SXM-141GB", "nodes": 4, "inter_node_GBps": -1})";
  expect_error(load_cluster(file.string()), "cluster.inter_node_GBps", "positive");
  EXPECT_NE(load_cluster(file.string()).error().message.find(file.string()), std::string::npos);
  std::filesystem::remove(file);
  expect_error(load_cluster(file.string()), file.string(), "cannot open");
}

// The files a cluster file names stay beside the hardware, relative to the cluster file; where no
// file can be read (a cluster given inline), naming one is an error, not ignored.
TEST(Cluster, FilesAreKeptApartFromTheHardware) {
  const auto dir = std::filesystem::temp_directory_path() / ("mist_spec_test_files-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "c.json") << R"({"gpu": "A100-SXM4-80GB", "nodes": 1, "profile_db": "ops.db",
                                       "time_constants": "/abs/k.json"})";
  auto c = load_cluster((dir / "c.json").string());
  ASSERT_TRUE(c.has_value()) << c.error().to_string();
  EXPECT_EQ(c->files.profile_db, (dir / "ops.db").string());
  EXPECT_EQ(c->files.time_constants, "/abs/k.json");
  const Json j = cluster_to_json(c->cluster, c->files);
  EXPECT_EQ(j.at("profile_db"), (dir / "ops.db").string());
  EXPECT_FALSE(cluster_to_json(c->cluster).contains("profile_db"));
  auto back = cluster_file_from_json(j, "cluster");
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->cluster, c->cluster);
  EXPECT_EQ(back->files, c->files);
  expect_error(cluster_from_json(j, "runs[2].cluster"), "runs[2].cluster.profile_db", "names a file");
  std::filesystem::remove_all(dir);
}

TEST(Cluster, PcieBandwidth) {
  EXPECT_DOUBLE_EQ(pcie_x16_bw(3), 16 * kGB);
  EXPECT_DOUBLE_EQ(pcie_x16_bw(4), 31 * kGB);
  EXPECT_DOUBLE_EQ(pcie_x16_bw(5), 63 * kGB);
  EXPECT_DOUBLE_EQ(pcie_x16_bw(0), 0);
}

}  // namespace
}  // namespace mist::spec
