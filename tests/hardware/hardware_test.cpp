#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "hardware/comm_model.hpp"
#include "hardware/perf_model.hpp"

namespace mist::hardware {
namespace {

spec::ClusterSpec cluster(const std::string& gpu, int64_t nodes, int64_t per_node) {
  return *spec::cluster_from_json(Json{{"gpu", gpu}, {"nodes", nodes}, {"gpus_per_node", per_node}}, "cluster");
}

TEST(PerfModel, LargeGemmRunsAtTheMeasuredRate) {
  const auto g = *spec::catalog_gpu("A100-SXM4-80GB");
  // 108 SMs × 256×128 tiles: m = 108·256·4, n = 128 gives exactly 4 full waves.
  const double m = 108 * 256 * 4, n = 128 * 8, k = 8192;
  const double t = gemm_time(g, spec::Dtype::kBf16, 1, m, n, k);
  const double rate = 2 * m * n * k / t;
  // The measured rate, less each tile's fixed cost (k + gemm_k_overhead of main loop).
  const double tiles = k / (k + PerfConstants{}.gemm_k_overhead);
  EXPECT_NEAR(rate / (271.2e12 * tiles), 1.0, 0.01);
  // fp32 runs on the fp32 pipes at 0.8 of 19.5 TFLOP/s (no MAMF measured for fp32).
  const double t32 = gemm_time(g, spec::Dtype::kFp32, 1, m, n, k);
  EXPECT_NEAR(2 * m * n * k / t32 / (0.8 * 19.5e12 * tiles), 1.0, 0.01);
}

// Under a power limit below the TDP compute-bound kernels slow by the cube root of the dynamic
// power left; memory-bound ones keep the HBM rate; MFU's peak stays the datasheet's.
TEST(PerfModel, PowerLimitSlowsComputeBoundKernelsOnly) {
  auto g = *spec::catalog_gpu("H100-SXM5-80GB");
  EXPECT_DOUBLE_EQ(power_limited_clock(g), 1.0);  // run at its TDP
  const double m = 132 * 256 * 4, n = 128 * 8, k = 8192;
  const double at_tdp = gemm_time(g, spec::Dtype::kBf16, 1, m, n, k);
  const double stream_at_tdp = streaming_time(g, 1e9, PerfConstants{});
  g.power_limit_watts = 500;
  const double clock = power_limited_clock(g);
  EXPECT_NEAR(clock, std::cbrt((500.0 - g.idle_watts) / (700.0 - g.idle_watts)), 1e-12);
  EXPECT_LT(clock, 0.9);
  EXPECT_GT(clock, 0.85);
  EXPECT_NEAR(gemm_time(g, spec::Dtype::kBf16, 1, m, n, k) / at_tdp, 1 / clock, 1e-3);
  EXPECT_DOUBLE_EQ(streaming_time(g, 1e9, PerfConstants{}), stream_at_tdp);
  EXPECT_DOUBLE_EQ(peak_matmul_flops(g, spec::Dtype::kBf16), 989e12);
  // The catalog's torchtitan H100 (96 GB, 500 W) is capped the same way.
  const auto capped = *spec::catalog_gpu("H100-SXM5-96GB");
  EXPECT_NEAR(power_limited_clock(capped), clock, 1e-12);
}

TEST(PerfModel, WaveQuantisationAndMemoryBound) {
  const auto g = *spec::catalog_gpu("H100-SXM5-80GB");
  const double k = 4096;
  // 12×11 tiles of 256×128 fill H100's 132 SMs exactly; one more row spills into a second wave
  // (smaller tiles soften it, at their lower efficiency).
  const double full = gemm_time(g, spec::Dtype::kBf16, 1, 256 * 12, 128 * 11, k);
  const double spill = gemm_time(g, spec::Dtype::kBf16, 1, 256 * 12 + 1, 128 * 11, k);
  EXPECT_GT(spill / full, 1.4);
  // A skinny GEMM (batch·k reads dominate) is limited by HBM bandwidth.
  const double m = 1, n = 16384, kk = 16384;
  const double t = gemm_time(g, spec::Dtype::kBf16, 1, m, n, kk);
  const double bytes = (m * kk + kk * n + m * n) * 2;
  EXPECT_NEAR(t, bytes / (3.35e12 * 0.85) + 4e-6, 1e-9);
  EXPECT_GT(t, 2 * m * n * kk / 794.5e12);
}

TEST(PerfModel, StreamingUsesHbmBandwidth) {
  const auto g = *spec::catalog_gpu("A100-SXM4-40GB");
  EXPECT_NEAR(streaming_time(g, 1.555e12 * 0.85), 1.0 + 4e-6, 1e-9);
  EXPECT_EQ(streaming_time(g, 0), 0);
  // Faster memory, same work: H200 streams faster than H100.
  EXPECT_LT(streaming_time(*spec::catalog_gpu("H200-SXM-141GB"), 1e9),
            streaming_time(*spec::catalog_gpu("H100-SXM5-80GB"), 1e9));
}

TEST(CommModel, RingFormulas) {
  const auto c = cluster("A100-SXM4-80GB", 2, 8);
  const CommConstants k;
  const double B = 1e9, a = c.intra_node_latency, base = k.collective_base_s;
  const double bw = 300e9 * (k.nvlink_efficiency - k.nvlink_small_group / 8);
  const Group g{8, false};
  EXPECT_NEAR(collective_time(c, Collective::kAllReduce, g, B), base + 2 * (7.0 / 8 * B / bw + 7 * a), 1e-12);
  EXPECT_NEAR(collective_time(c, Collective::kAllGather, g, B), base + 7.0 / 8 * B / bw + 7 * a, 1e-12);
  EXPECT_EQ(collective_time(c, Collective::kAllReduce, Group{1, false}, B), 0);
  // A ring of 2 reaches less of the link than one of 8.
  const double bw2 = 300e9 * (k.nvlink_efficiency - k.nvlink_small_group / 2);
  EXPECT_NEAR(collective_time(c, Collective::kAllReduce, Group{2, false}, B), base + 2 * (B / 2 / bw2 + a), 1e-12);
  // Leaving the node runs at the per-GPU network share: much slower than NVLink.
  EXPECT_GT(collective_time(c, Collective::kAllReduce, Group{16, true}, B),
            5 * collective_time(c, Collective::kAllReduce, Group{8, false}, B));
}

// The NVLink ring's constants against all-reduce times measured with nccl-tests on one DGX A100
// (vTrain's tables: 2-8 GPUs, 1 MiB to 1 GiB in 1 MiB steps, data/measured/nccl_allreduce_a100_vtrain.csv):
// 2.5% mean and 18% worst error over the 7,168 rows. Without the fixed cost per call and the
// small-group bandwidth (the model before 2026-12-07: 9.8% mean), small messages were predicted up
// to 5 times too fast (81% worst).
TEST(CommModel, NvlinkAllReduceAgainstMeasuredA100Node) {
  const auto c = cluster("A100-SXM4-80GB", 1, 8);
  std::ifstream in(std::string(MIST_SOURCE_DIR) + "/data/measured/nccl_allreduce_a100_vtrain.csv");
  ASSERT_TRUE(in);
  std::string line;
  double sum = 0, worst = 0, sum_flat = 0, worst_flat = 0;
  int rows = 0;
  CommConstants flat;
  flat.nvlink_efficiency = 0.78;
  flat.nvlink_small_group = 0;
  flat.collective_base_s = 0;
  auto flat_cluster = c;
  flat_cluster.intra_node_latency = 2e-6;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#' || line[0] == 'g') continue;
    int n = 0;
    double bytes = 0, us = 0;
    ASSERT_EQ(std::sscanf(line.c_str(), "%d,%lf,%lf", &n, &bytes, &us), 3) << line;
    const double measured = us * 1e-6;
    const double e = std::abs(collective_time(c, Collective::kAllReduce, Group{n, false, n}, bytes) / measured - 1);
    sum += e;
    worst = std::max(worst, e);
    const double ef =
        std::abs(collective_time(flat_cluster, Collective::kAllReduce, Group{n, false, n}, bytes, flat) / measured - 1);
    sum_flat += ef;
    worst_flat = std::max(worst_flat, ef);
    ++rows;
  }
  ASSERT_EQ(rows, 7 * 1024);
  EXPECT_LT(sum / rows, 0.05);
  EXPECT_LT(worst, 0.20);
  EXPECT_GT(worst_flat, 0.5);
}

// A DGX A100 has one 200 Gb/s NIC per GPU and NCCL runs one ring per NIC: a data-parallel group
// with 8 members per node crosses nodes at 8 NICs' bandwidth, one with 1 member per node at one's.
TEST(CommModel, InterNodeRingsUseOneNicPerMemberOnTheNode) {
  const auto c = cluster("A100-SXM4-80GB", 4, 8);
  const double B = 4e9;
  CommConstants k;
  k.rail_local_rings = true;
  const double one = collective_time(c, Collective::kAllReduce, Group{32, true, 1}, B, k);
  const double eight = collective_time(c, Collective::kAllReduce, Group{32, true, 8}, B, k);
  // Off by default (docs/time-model.md): every member crosses at one NIC's share.
  EXPECT_EQ(collective_time(c, Collective::kAllReduce, Group{32, true, 8}, B), one);
  const double fixed = k.collective_base_s + 62 * c.inter_node_latency;
  EXPECT_NEAR(one, k.collective_base_s + 2 * (31.0 / 32 * B / (25e9 * 0.85) + 31 * c.inter_node_latency), 1e-9);
  EXPECT_NEAR((one - fixed) / (eight - fixed), 8, 1e-9);
  // Never faster than the node's own links (NVLink's ring of 32 on A100).
  auto fat = c;
  fat.inter_node_bw = 100e9;
  const double capped = collective_time(fat, Collective::kAllGather, Group{32, true, 8}, B, k);
  EXPECT_NEAR(capped,
              k.collective_base_s + 31.0 / 32 * B / (300e9 * (k.nvlink_efficiency - k.nvlink_small_group / 32)) +
                  31 * c.inter_node_latency,
              1e-9);
  // Megatron's rank order: with tp = 2 a node holds 4 members of each DP group; TP = 8 leaves one.
  EXPECT_EQ(place_groups(c, 2, 16, 1).dp.per_node, 4);
  EXPECT_EQ(place_groups(c, 8, 4, 1).dp.per_node, 1);
  EXPECT_EQ(place_groups(c, 1, 32, 1).dp.per_node, 8);
}

TEST(CommModel, MegatronPlacement) {
  const auto c = cluster("H100-SXM5-80GB", 4, 8);
  auto p = place_groups(c, 8, 2, 2);  // TP fills a node: DP and PP cross nodes
  EXPECT_FALSE(p.tp.crosses_nodes);
  EXPECT_TRUE(p.dp.crosses_nodes);
  EXPECT_TRUE(p.pp_crosses_nodes);
  p = place_groups(c, 2, 4, 4);  // tp·dp = 8: DP inside a node
  EXPECT_FALSE(p.dp.crosses_nodes);
  EXPECT_TRUE(p.pp_crosses_nodes);
  p = place_groups(c, 2, 2, 8);
  EXPECT_FALSE(p.pp_crosses_nodes);
}

// Host copies while every GPU of the node copies: the GPUs behind a PCIe switch divide its x16
// uplink in each direction (full duplex), and both directions of all the node's GPUs share its DRAM.
TEST(CommModel, HostCopiesShareTheSwitchUplinkAndTheNodesMemory) {
  const auto h100 = cluster("H100-SXM5-80GB", 2, 8);  // DGX H100: 2 GPUs a switch, 614.4 GB/s DRAM
  ASSERT_EQ(h100.gpus_per_pcie_switch, 2);
  const double link = 63e9 * 0.88;
  EXPECT_NEAR(host_copy_time(h100, link), 2.0, 1e-12);  // half the uplink
  EXPECT_NEAR(host_copy_time(h100, link, link), 2.0, 1e-12);  // the other direction rides along
  // Both directions at once on all 8 GPUs need 8 × 2 × 27.7 = 443 GB/s of the 460.8 the DRAM gives:
  // the link still binds; on a node with half the DRAM, the memory does.
  auto slow_host = h100;
  slow_host.host_memory_bw = 307.2e9;
  const double dram = 307.2e9 * 0.75 / 8;
  EXPECT_NEAR(host_copy_time(slow_host, link, link), 2 * link / dram, 1e-9);
  EXPECT_NEAR(host_copy_time(slow_host, link, 0), 2.0, 1e-12);  // one direction: the link again
  // A GPU alone on its node has the uplink to itself; a cluster file can say the switch is its own.
  EXPECT_NEAR(host_copy_time(cluster("H100-SXM5-80GB", 1, 1), link), 1.0, 1e-12);
  auto own = *spec::cluster_from_json(
      Json{{"gpu", "H100-SXM5-80GB"}, {"nodes", 2}, {"gpus_per_node", 8}, {"gpus_per_pcie_switch", 1}}, "cluster");
  EXPECT_NEAR(host_copy_time(own, link), 1.0, 1e-12);
  EXPECT_EQ(host_copy_time(h100, 0, 0), 0);
}

TEST(CommModel, HostSideFieldsAreCheckedByName) {
  auto r = spec::cluster_from_json(
      Json{{"gpu", "H100-SXM5-80GB"}, {"nodes", 1}, {"gpus_per_node", 4}, {"gpus_per_pcie_switch", 8}}, "cluster");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().path, "cluster.gpus_per_pcie_switch");
  r = spec::cluster_from_json(Json{{"gpu", "H100-SXM5-80GB"}, {"nodes", 1}, {"host_memory_GBps", -1}}, "cluster");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().path, "cluster.host_memory_GBps");
  // A node smaller than the GPU's usual one keeps at most its own GPUs behind a switch.
  EXPECT_EQ(cluster("A100-SXM4-80GB", 1, 1).gpus_per_pcie_switch, 1);
  EXPECT_EQ(cluster("A100-SXM4-80GB", 1, 8).gpus_per_pcie_switch, 2);
}

// An all-to-all sends an equal share to every member at once: inside a node (n - 1)/n of the data
// crosses NVLink; across nodes the shares for the m members on the rank's node go over NVLink while
// the other n - m go over its network share at the same time, and the slower path sets the time.
TEST(CommModel, AllToAllSplitsNvlinkAndNetwork) {
  const auto c = cluster("H100-SXM5-80GB", 4, 8);
  const CommConstants k;
  const double B = 1e9, nvl = c.intra_node_bw * k.nvlink_efficiency, net = c.inter_node_bw * 0.85;
  const double base = k.collective_base_s;
  EXPECT_NEAR(collective_time(c, Collective::kAllToAll, Group{8, false, 8}, B),
              base + 7.0 / 8 * B / nvl + c.intra_node_latency, 1e-12);
  const double cross = collective_time(c, Collective::kAllToAll, Group{32, true, 8}, B);
  EXPECT_NEAR(cross, base + std::max(7.0 / 32 * B / nvl, 24.0 / 32 * B / net) + c.inter_node_latency, 1e-12);
  // Spread one member per node, everything goes over the network.
  EXPECT_NEAR(collective_time(c, Collective::kAllToAll, Group{4, true, 1}, B),
              base + 3.0 / 4 * B / net + c.inter_node_latency, 1e-12);
  EXPECT_EQ(collective_time(c, Collective::kAllToAll, Group{1, false, 1}, B), 0);
}

// Megatron's expert grid on the same ranks: etp fastest, then ep, then expert data parallel.
TEST(CommModel, ExpertGridPlacement) {
  const auto c = cluster("H100-SXM5-80GB", 2, 8);
  auto p = place_groups(c, 2, 8, 1, 8, 1);  // EP over ranks 0..7: one node; EDP 2 across nodes
  EXPECT_EQ(p.ep.size, 8);
  EXPECT_FALSE(p.ep.crosses_nodes);
  EXPECT_EQ(p.etp.size, 1);
  EXPECT_EQ(p.edp.size, 2);
  EXPECT_TRUE(p.edp.crosses_nodes);
  EXPECT_EQ(p.edp.per_node, 1);
  p = place_groups(c, 2, 8, 1, 8, 2);  // EP members 2 apart span 16 ranks: 4 on each node
  EXPECT_TRUE(p.ep.crosses_nodes);
  EXPECT_EQ(p.ep.per_node, 4);
  EXPECT_FALSE(p.etp.crosses_nodes);
  EXPECT_EQ(p.edp.size, 1);
  p = place_groups(c, 4, 4, 1);  // dense: no expert groups
  EXPECT_EQ(p.ep.size, 1);
  EXPECT_EQ(p.edp.size, 16);
}

// An NVL72-class domain (2026-12-07): a group that leaves its 4-GPU tray stays on NVLink while it
// stays in the rack; racks are joined by the network.
TEST(CommModel, NvlinkDomainOfSeveralNodes) {
  const auto trays = cluster("B200-SXM-180GB", 16, 4);  // 64 GPUs, each tray its own domain
  auto rack = trays;
  rack.nvlink_domain = 64;
  const auto a = place_groups(trays, 1, 64, 1, 64, 1), b = place_groups(rack, 1, 64, 1, 64, 1);
  EXPECT_TRUE(a.ep.crosses_nodes);
  EXPECT_EQ(a.ep.per_node, 4);
  EXPECT_FALSE(b.ep.crosses_nodes);
  // The expert all-to-all over the 64 GPUs runs at NVLink's rate inside the rack.
  const double B = 1e9;
  const double in_rack = collective_time(rack, Collective::kAllToAll, b.ep, B);
  const CommConstants k;
  EXPECT_NEAR(in_rack,
              k.collective_base_s + 63.0 / 64 * B / (rack.intra_node_bw * k.nvlink_efficiency) + rack.intra_node_latency,
              1e-12);
  EXPECT_GT(collective_time(trays, Collective::kAllToAll, a.ep, B), 5 * in_rack);
  // Two racks: tp 8 × dp 8 fills one, so the data-parallel group stays on NVLink and the pipeline's
  // two stages are a rack apart; in one rack both stages share the fabric.
  auto two = cluster("B200-SXM-180GB", 32, 4);
  two.nvlink_domain = 64;
  const auto p = place_groups(two, 8, 8, 2);
  EXPECT_FALSE(p.tp.crosses_nodes);
  EXPECT_FALSE(p.dp.crosses_nodes);
  EXPECT_TRUE(p.pp_crosses_nodes);
  EXPECT_FALSE(place_groups(rack, 8, 4, 2).pp_crosses_nodes);
  EXPECT_TRUE(place_groups(trays, 8, 4, 2).tp.crosses_nodes);
}

}  // namespace
}  // namespace mist::hardware
