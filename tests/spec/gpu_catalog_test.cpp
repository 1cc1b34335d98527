// The GPU catalog against the published figures in tests/data/groundtruth/gpus.csv.
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/units.hpp"
#include "spec/cluster.hpp"

namespace mist::spec {
namespace {

using units::kGB;
using units::kGiB;
using units::kMiB;

struct CsvRow {
  std::string gpu;
  double bf16, fp16, fp8, fp32, tf32, memory_gb, mem_bw_tbps, link_gbps;
  int pcie_gen;
};

// gpus.csv: '#' comment lines, a header, then one GPU per line (the last column may be empty).
std::vector<CsvRow> read_groundtruth() {
  std::ifstream in(std::string(MIST_TEST_DATA_DIR) + "/groundtruth/gpus.csv");
  EXPECT_TRUE(in.good()) << "cannot open gpus.csv";
  std::vector<CsvRow> rows;
  std::string line;
  bool header = true;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (header) {
      EXPECT_EQ(line.rfind("gpu,bf16_tflops,fp16_tflops,fp8_tflops,fp32_tflops,tf32_tflops,"
                           "memory_gb,mem_bw_tbps,link_gbps_uni,pcie_gen",
                           0),
                0u)
          << "gpus.csv columns changed: " << line;
      header = false;
      continue;
    }
    std::vector<std::string> cells;
    std::stringstream ss(line);
    for (std::string cell; std::getline(ss, cell, ',');) cells.push_back(cell);
    EXPECT_GE(cells.size(), 10u) << line;
    if (cells.size() < 10) continue;
    rows.push_back({cells[0], std::stod(cells[1]), std::stod(cells[2]), std::stod(cells[3]),
                    std::stod(cells[4]), std::stod(cells[5]), std::stod(cells[6]),
                    std::stod(cells[7]), std::stod(cells[8]), std::stoi(cells[9])});
  }
  return rows;
}

void expect_close(double actual, double expected, const char* what) {
  EXPECT_NEAR(actual, expected, 1e-9 * std::fabs(expected)) << what;
}

TEST(GpuCatalog, Loads) {
  auto catalog = gpu_catalog();
  ASSERT_TRUE(catalog.has_value()) << catalog.error().to_string();
  EXPECT_GE(catalog->size(), 11u);
  EXPECT_TRUE(catalog_gpu("A10G-24GB").has_value());
  EXPECT_TRUE(catalog_gpu("H100-PCIe-80GB").has_value());
}

TEST(GpuCatalog, MatchesPublishedFigures) {
  const auto rows = read_groundtruth();
  ASSERT_GE(rows.size(), 9u);
  for (const CsvRow& r : rows) {
    SCOPED_TRACE(r.gpu);
    auto g = catalog_gpu(r.gpu);
    ASSERT_TRUE(g.has_value()) << g.error().to_string();
    expect_close(g->bf16_flops, r.bf16 * 1e12, "bf16");
    expect_close(g->fp16_flops, r.fp16 * 1e12, "fp16");
    expect_close(g->fp8_flops, r.fp8 * 1e12, "fp8");
    expect_close(g->fp32_flops, r.fp32 * 1e12, "fp32");
    expect_close(g->tf32_flops, r.tf32 * 1e12, "tf32");
    expect_close(g->mem_bw, r.mem_bw_tbps * 1e12, "mem_bw");
    expect_close(g->link_bw, r.link_gbps * kGB, "link");
    EXPECT_EQ(g->pcie_gen, r.pcie_gen);
    // The catalog holds the total the driver reports (GiB), a little under the nominal capacity.
    const double gib = g->memory_bytes / kGiB;
    EXPECT_LE(gib, r.memory_gb) << "memory";
    EXPECT_GE(gib, 0.9 * r.memory_gb) << "memory";
  }
}

TEST(GpuCatalog, EntriesAreConsistent) {
  for (const GpuSpec& g : *gpu_catalog()) {
    SCOPED_TRACE(g.name);
    EXPECT_FALSE(g.source.empty());
    EXPECT_GT(g.memory_bytes, 0);
    EXPECT_GT(g.fp32_flops, 0);
    EXPECT_GT(std::max(g.bf16_flops, g.fp16_flops), g.fp32_flops);  // tensor cores are faster
    EXPECT_GT(g.default_inter_node_bw, 0);
    EXPECT_GT(g.default_host_memory_bytes, g.memory_bytes);
    EXPECT_DOUBLE_EQ(g.cuda_context_bytes, 512 * kMiB);
    if (g.vendor == "nvidia") {
      EXPECT_GE(g.compute_capability, 7.0);
      // cuBLAS workspace: 8.125 MiB by default, 32 MiB from Hopper (sm90) on.
      EXPECT_DOUBLE_EQ(g.blas_workspace_bytes, (g.compute_capability >= 9.0 ? 32.0 : 8.125) * kMiB);
      // bf16 arrived with Ampere (sm80).
      EXPECT_EQ(g.bf16_flops > 0, g.compute_capability >= 8.0);
    } else {
      EXPECT_EQ(g.vendor, "amd");
      EXPECT_EQ(g.compute_capability, 0);
    }
  }
  EXPECT_NEAR(catalog_gpu("L4-24GB")->memory_bytes / kMiB, 23034, 1e-6);
  EXPECT_NEAR(catalog_gpu("A100-SXM4-80GB")->memory_bytes / kGiB, 80, 1e-9);
}

TEST(GpuCatalog, UnknownName) {
  auto g = catalog_gpu("TPU-v5p");
  ASSERT_FALSE(g.has_value());
  EXPECT_NE(g.error().message.find("unknown GPU"), std::string::npos);
  EXPECT_NE(g.error().message.find("H100-SXM5-80GB"), std::string::npos);
}

}  // namespace
}  // namespace mist::spec
