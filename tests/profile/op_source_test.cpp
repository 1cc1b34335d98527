#include "profile/op_source.hpp"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <unistd.h>

#include "../analysis/test_jobs.hpp"
#include "analysis/prepared_job.hpp"
#include "analysis/time_model.hpp"
#include "job/prepare.hpp"
#include "graph/lower.hpp"
#include "spec/cluster.hpp"

namespace mist::profile {
namespace {

using mist::testing::cluster;
using mist::testing::training;

struct Block {
  spec::ModelSpec m = mist::testing::gpt(4, 1024, 16);
  spec::TrainingSpec t = training(8, 512, spec::Dtype::kBf16, true, false);
  graph::LoweredModel lm = graph::lower(m, t.seq_length, graph::lowering_options(t, false));
  sym::Bindings at = [this] {
    auto a = lm.dims;
    a["b"] = 2;
    a["t"] = 1;
    return a;
  }();
  const graph::Op& op(const std::string& name) const {
    for (const auto& o : lm.block.ops)
      if (o.name == name) return o;
    throw std::runtime_error("no op " + name);
  }
  const graph::Op& first_of_kind(bool gemm) const {
    for (const auto& o : lm.block.ops)
      if (o.kind != graph::OpKind::kView && o.kind != graph::OpKind::kFlashAttention && o.is_gemm == gemm) return o;
    throw std::runtime_error("no such op");
  }
  std::string shape() const { return shape_key(graph::LayerKind::kBlock, at); }
};

Measurement entry(const std::string& device, const graph::Op& op, const std::string& shape, const char* pass,
                  double s) {
  return {device, op.name, shape, "bf16", pass, graph::to_string(op.kind), s, s, s, 3, "test", "2026-11-30"};
}

spec::GpuSpec gpu(const char* name) { return *spec::catalog_gpu(name); }

TEST(ShapeKey, NamesTheLayerDimensions) {
  Block b;
  EXPECT_EQ(b.shape(), "b=2;s=512;h=1024;a=16;g=16;f=4096;t=1");
  EXPECT_EQ(shape_key(graph::LayerKind::kHead, b.at), b.shape() + ";V=51200");
}

TEST(Scaling, MemoryBoundOpsScaleWithBandwidth) {
  Block b;
  const auto& ln = b.first_of_kind(false);
  const auto a100 = gpu("A100-SXM4-80GB"), h100 = gpu("H100-SXM5-80GB");
  EXPECT_DOUBLE_EQ(scale_factor(a100, h100, spec::Dtype::kBf16, ln, false, b.at), a100.mem_bw / h100.mem_bw);
  EXPECT_DOUBLE_EQ(scale_factor(h100, a100, spec::Dtype::kBf16, ln, true, b.at), h100.mem_bw / a100.mem_bw);
}

TEST(Scaling, GemmsScaleWithMatmulRateAndWaves) {
  Block b;
  const auto& qkv = b.op("attn.qkv");
  ASSERT_TRUE(qkv.is_gemm);
  const auto a100 = gpu("A100-SXM4-80GB"), h100 = gpu("H100-SXM5-80GB");
  const double rate = hardware::achievable_matmul_flops(a100, spec::Dtype::kBf16) /
                      hardware::achievable_matmul_flops(h100, spec::Dtype::kBf16);
  const double f = scale_factor(a100, h100, spec::Dtype::kBf16, qkv, false, b.at);
  // Faster device, shorter time; the wave term keeps it within the rate ratio's neighbourhood.
  EXPECT_LT(f, 1.0);
  EXPECT_NEAR(f / rate, 1.0, 0.25);
  // A GEMM of exactly one full wave on the A100 (108 SMs) and a ragged one on the H100 (132 SMs):
  // the wave term is the utilisation ratio.
  graph::Op g = qkv;
  g.gemm.batch = sym::Expr(1.0);
  g.gemm.m = sym::Expr(108 * 128.0);
  g.gemm.n = sym::Expr(128.0);
  g.gemm.k = sym::Expr(1024.0);
  const double tiles = 108, util_h100 = tiles / (std::ceil(tiles / h100.sm_count) * h100.sm_count);
  EXPECT_NEAR(scale_factor(a100, h100, spec::Dtype::kBf16, g, false, b.at), rate / util_h100, 1e-12);
}

TEST(Resolve, ExactThenScaledThenAnalytical) {
  Block b;
  const auto& qkv = b.op("attn.qkv");
  const auto h100 = gpu("H100-SXM5-80GB");
  const auto analytical = hardware::op_time(h100, spec::Dtype::kBf16, qkv, b.at);
  // No table: analytical.
  auto r = resolve_op(nullptr, h100, spec::Dtype::kBf16, qkv, b.shape(), b.at);
  EXPECT_EQ(r.fwd, Source::kAnalytical);
  EXPECT_DOUBLE_EQ(r.time.fwd, analytical.fwd);
  // Only an A100 forward entry: the forward is scaled, the backward analytical.
  OpTable scaled({entry("A100-SXM4-80GB", qkv, b.shape(), "forward", 1e-3)});
  r = resolve_op(&scaled, h100, spec::Dtype::kBf16, qkv, b.shape(), b.at);
  EXPECT_EQ(r.fwd, Source::kScaled);
  EXPECT_EQ(r.bwd, Source::kAnalytical);
  EXPECT_DOUBLE_EQ(r.time.fwd, 1e-3 * scale_factor(gpu("A100-SXM4-80GB"), h100, spec::Dtype::kBf16, qkv, false, b.at));
  EXPECT_DOUBLE_EQ(r.time.bwd, analytical.bwd);
  // An exact entry wins over the scaled one; another shape or dtype is not used.
  OpTable both({entry("A100-SXM4-80GB", qkv, b.shape(), "forward", 1e-3),
                entry("H100-SXM5-80GB", qkv, b.shape(), "forward", 7e-4),
                entry("H100-SXM5-80GB", qkv, b.shape() + "x", "backward", 1.0)});
  r = resolve_op(&both, h100, spec::Dtype::kBf16, qkv, b.shape(), b.at);
  EXPECT_EQ(r.fwd, Source::kExact);
  EXPECT_DOUBLE_EQ(r.time.fwd, 7e-4);
  EXPECT_EQ(r.bwd, Source::kAnalytical);
  r = resolve_op(&both, h100, spec::Dtype::kFp16, qkv, b.shape(), b.at);
  EXPECT_EQ(r.fwd, Source::kAnalytical);
  // A device mist's catalog does not know cannot be scaled from.
  OpTable unknown({entry("my-laptop", qkv, b.shape(), "forward", 1e-3)});
  EXPECT_EQ(resolve_op(&unknown, h100, spec::Dtype::kBf16, qkv, b.shape(), b.at).fwd, Source::kAnalytical);
}

analysis::StageTimer timer(const spec::ModelSpec& m, const spec::ClusterSpec& c, const spec::TrainingSpec& t,
                           const plan::Plan& p, const analysis::TimeConstants& k = {}) {
  auto job = analysis::PreparedJob::create(m, c, t, k);
  EXPECT_TRUE(job) << job.error().to_string();
  auto r = analysis::StageTimer::create(*job, p);
  EXPECT_TRUE(r) << r.error().to_string();
  return *r;
}

// StageTimer with a profile: measured block ops replace the analytical ones and are counted; with
// no profile nothing changes.
TEST(StageTimerProfile, UsesMeasuredBlockOpsAndCountsSources) {
  Block b;
  auto c = cluster("H100-SXM5-80GB", 1, 8);
  auto p = plan::uniform_plan(b.m, 1, 1, 1, 2, 4, {});
  const auto plain = timer(b.m, c, b.t, p);
  EXPECT_EQ(plain.op_sources().exact, 0);
  EXPECT_EQ(plain.op_sources().scaled, 0);
  EXPECT_GT(plain.op_sources().analytical, 10);

  std::vector<Measurement> rows;
  double fwd = 0, bwd = 0;
  for (const auto& op : b.lm.block.ops) {
    if (op.kind == graph::OpKind::kView) continue;
    rows.push_back(entry("H100-SXM5-80GB", op, b.shape(), "forward", 1e-4));
    fwd += 1e-4;
    const auto r = resolve_op(nullptr, c.gpu, spec::Dtype::kBf16, op, b.shape(), b.at);
    if (r.has_bwd) rows.push_back(entry("H100-SXM5-80GB", op, b.shape(), "backward", 2e-4)), bwd += 2e-4;
  }
  analysis::TimeConstants k;
  k.profile = std::make_shared<const OpTable>(rows);
  const auto measured = timer(b.m, c, b.t, p, k);
  EXPECT_DOUBLE_EQ(measured.block_times().fwd, fwd);
  EXPECT_DOUBLE_EQ(measured.block_times().bwd, bwd);
  EXPECT_EQ(measured.op_sources().exact, static_cast<int>(rows.size()));
  EXPECT_EQ(measured.op_sources().total(), plain.op_sources().total());
  // The embedding and head were not profiled: still analytical, as before.
  EXPECT_DOUBLE_EQ(measured.head_times().fwd, plain.head_times().fwd);
  EXPECT_DOUBLE_EQ(measured.embedding_times().bwd, plain.embedding_times().bwd);
}

TEST(StageTimerProfile, ClusterFileNamesTheDatabase) {
  Block b;
  const auto dir = std::filesystem::temp_directory_path() / ("mist-profile-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  {
    auto db = Database::open((dir / "ops.db").string());
    ASSERT_TRUE(db);
    const auto& qkv = b.op("attn.qkv");
    ASSERT_TRUE(db->upsert({entry("H100-SXM5-80GB", qkv, b.shape(), "forward", 0.5)}));
  }
  std::ofstream(dir / "cluster.json") << R"({"gpu": "H100-SXM5-80GB", "nodes": 1, "gpus_per_node": 1, "profile_db": "ops.db"})";
  auto c = spec::load_cluster((dir / "cluster.json").string());
  ASSERT_TRUE(c) << c.error().to_string();
  EXPECT_EQ(c->files.profile_db, (dir / "ops.db").string());  // relative to the cluster file
  job::Job j{b.m, c->cluster, b.t, plan::uniform_plan(b.m, 1, 1, 1, 2, 4, {}), c->files};
  auto pred = job::predict(j);
  ASSERT_TRUE(pred) << pred.error().to_string();
  const auto* t = &pred->time;
  EXPECT_EQ(t->op_sources.exact, 1);
  EXPECT_EQ(to_json(t->op_sources)["exact"], 1);
  EXPECT_NE(describe(t->op_sources).find("1 measured on this device"), std::string::npos);
  EXPECT_GT(t->iteration_time_s, 0.5 * 4 * 4);  // 4 layers × 4 micro-batches × a 0.5 s GEMM at least

  // A database that is not there: an error naming the field, not a silent fallback.
  j.files.profile_db = (dir / "missing.db").string();
  auto missing = job::predict(j);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().path, "cluster.profile_db");
  std::filesystem::remove_all(dir);
}

TEST(ClusterField, ProfileDbMustNameAFileAndRoundTrips) {
  auto empty = spec::cluster_from_json(Json{{"gpu", "A100-SXM4-80GB"}, {"nodes", 1}, {"profile_db", ""}}, "cluster");
  ASSERT_FALSE(empty);
  EXPECT_EQ(empty.error().path, "cluster.profile_db");
  auto wrong = spec::cluster_from_json(Json{{"gpu", "A100-SXM4-80GB"}, {"nodes", 1}, {"profile_db", 3}}, "cluster");
  ASSERT_FALSE(wrong);
  EXPECT_EQ(wrong.error().path, "cluster.profile_db");
  auto c = spec::cluster_file_from_json(Json{{"gpu", "A100-SXM4-80GB"}, {"nodes", 1}, {"profile_db", "/x/ops.db"}},
                                        "cluster");
  ASSERT_TRUE(c) << c.error().to_string();
  EXPECT_EQ(c->files.profile_db, "/x/ops.db");
  auto back = spec::cluster_file_from_json(spec::cluster_to_json(c->cluster, c->files), "cluster");
  ASSERT_TRUE(back);
  EXPECT_EQ(back->cluster, c->cluster);
  EXPECT_EQ(back->files, c->files);
  // Without the field, the JSON form has none (unchanged output for every existing cluster).
  EXPECT_FALSE(spec::cluster_to_json(c->cluster).contains("profile_db"));
}

}  // namespace
}  // namespace mist::profile
