#include "advisor/prices.hpp"

#include <gtest/gtest.h>

#include "spec/cluster.hpp"

namespace mist::advisor {
namespace {

Json entry(const std::string& gpu, double usd) {
  return Json{{"gpu", gpu}, {"usd_per_gpu_hour", usd}, {"date", "2026-11-30"}, {"source", "a test"}};
}

TEST(Prices, TheBuiltInTableParsesAndCitesEveryPrice) {
  const auto& p = default_prices();
  ASSERT_TRUE(p.has_value()) << p.error().to_string();
  ASSERT_FALSE(p->empty());
  for (const auto& e : *p) {
    EXPECT_TRUE(spec::catalog_gpu(e.gpu).has_value()) << e.gpu;
    EXPECT_GT(e.usd_per_gpu_hour, 0);
    EXPECT_EQ(e.date.size(), 10u);
    EXPECT_NE(e.source.find("http"), std::string::npos) << e.gpu << ": a source must give its address";
    // Issue 18: each built-in price names the instance and whether it is a 1- or an 8-GPU one.
    EXPECT_FALSE(e.instance.empty()) << e.gpu;
    EXPECT_TRUE(e.gpus_per_instance == 1 || e.gpus_per_instance == 8) << e.gpu;
  }
  // A price for every catalog GPU but the H100 96GB, which no cloud was found to list.
  for (const auto& g : spec::gpu_catalog_names())
    EXPECT_EQ(find_price(*p, g).has_value(), g != "H100-SXM5-96GB") << g;
  // Clouds sell these only as 8-GPU instances, and multi-node training rents PCIe parts as 8-GPU
  // servers too: their price is the 8-GPU instance's ÷ 8, not a single-GPU instance's.
  for (const char* g : {"H100-SXM5-80GB", "H200-SXM-141GB", "B200-SXM-180GB", "A100-SXM4-80GB", "L40S-48GB",
                        "L4-24GB", "A10G-24GB"})
    EXPECT_EQ(find_price(*p, g)->gpus_per_instance, 8) << g;
}

TEST(Prices, InstanceFieldsAreOptionalAndChecked) {
  // A file of the earlier form (no instance fields) still reads.
  auto old_form = prices_from_json(Json::array({entry("L4-24GB", 1)}), "prices");
  ASSERT_TRUE(old_form.has_value()) << old_form.error().to_string();
  EXPECT_EQ((*old_form)[0].instance, "");
  EXPECT_EQ((*old_form)[0].gpus_per_instance, 0);
  Json full = entry("L40S-48GB", 3.77);
  full["instance"] = "AWS g6e.48xlarge";
  full["gpus_per_instance"] = 8;
  auto r = prices_from_json(Json::array({full}), "prices");
  ASSERT_TRUE(r.has_value()) << r.error().to_string();
  EXPECT_EQ((*r)[0].instance, "AWS g6e.48xlarge");
  EXPECT_EQ((*r)[0].gpus_per_instance, 8);
  full["gpus_per_instance"] = 0;
  auto zero = prices_from_json(Json::array({full}), "prices");
  ASSERT_FALSE(zero.has_value());
  EXPECT_EQ(zero.error().path, "prices[0].gpus_per_instance");
}

TEST(Prices, BadEntriesNameTheField) {
  auto expect_error = [](Json j, const std::string& path) {
    auto r = prices_from_json(j, "prices");
    ASSERT_FALSE(r.has_value()) << j.dump();
    EXPECT_EQ(r.error().path, path) << r.error().to_string();
  };
  expect_error(Json::array({entry("L4-24GB", -1)}), "prices[0].usd_per_gpu_hour");
  expect_error(Json::array({entry("L4-24GB", 0)}), "prices[0].usd_per_gpu_hour");
  expect_error(Json::array({entry("L4-24GB", 1e9)}), "prices[0].usd_per_gpu_hour");
  Json missing = entry("L4-24GB", 1);
  missing.erase("date");
  expect_error(Json::array({entry("L4-24GB", 1), missing}), "prices[1].date");
  Json text_price = entry("L4-24GB", 1);
  text_price["usd_per_gpu_hour"] = "1.5";
  expect_error(Json::array({text_price}), "prices[0].usd_per_gpu_hour");
  Json bad_date = entry("L4-24GB", 1);
  bad_date["date"] = "last week";
  expect_error(Json::array({bad_date}), "prices[0].date");
  Json stray = entry("L4-24GB", 1);
  stray["usd_per_hour"] = 3;
  expect_error(Json::array({stray}), "prices[0].usd_per_hour");
  expect_error(Json::array({entry("H100", 1)}), "prices[0].gpu");
  expect_error(Json::array({entry("L4-24GB", 1), entry("L4-24GB", 2)}), "prices[1].gpu");
  expect_error(entry("L4-24GB", 1), "prices");  // an object, not an array
}

TEST(Prices, AFileReplacesEntriesGpuByGpu) {
  const std::vector<GpuPrice> base = {{"L4-24GB", 1, "2026-01-01", "x"}, {"A10G-24GB", 2, "2026-01-01", "y"}};
  auto user = prices_from_json(Json::array({entry("A10G-24GB", 5), entry("H200-SXM-141GB", 9)}), "prices");
  ASSERT_TRUE(user.has_value());
  const auto merged = merge_prices(base, *user);
  ASSERT_EQ(merged.size(), 3u);
  EXPECT_EQ(find_price(merged, "L4-24GB")->usd_per_gpu_hour, 1);
  EXPECT_EQ(find_price(merged, "A10G-24GB")->usd_per_gpu_hour, 5);
  EXPECT_EQ(find_price(merged, "A10G-24GB")->source, "a test");
  EXPECT_EQ(find_price(merged, "H200-SXM-141GB")->usd_per_gpu_hour, 9);
  EXPECT_FALSE(find_price(merged, "B200-SXM-180GB").has_value());
}

}  // namespace
}  // namespace mist::advisor
