// Suggestions for unknown names: parts of a name first, then edit distance.
#include "core/closest_names.hpp"

#include <gtest/gtest.h>

namespace mist {
namespace {

const std::vector<std::string> kGpus = {"V100-SXM2-32GB", "A100-SXM4-40GB", "A100-SXM4-80GB", "H100-SXM5-80GB",
                                        "H100-SXM5-96GB", "H200-SXM-141GB", "B200-SXM-180GB", "L4-24GB",
                                        "L40S-48GB",      "MI300X-192GB",   "A10G-24GB",      "H100-PCIe-80GB"};

TEST(ClosestNames, APartOfTheNameFindsTheNamesThatContainIt) {
  // Issue 18: edit distance alone ranked L4-24GB, A10G-24GB and L40S-48GB closest to "H100".
  EXPECT_EQ(closest_names("H100", kGpus), (std::vector<std::string>{"H100-SXM5-80GB", "H100-SXM5-96GB", "H100-PCIe-80GB"}));
  EXPECT_EQ(closest_names("h100-sxm", kGpus)[0], "H100-SXM5-80GB");
  EXPECT_EQ(closest_names("mi300", kGpus)[0], "MI300X-192GB");
}

TEST(ClosestNames, EveryPartOfTheQueryInTheNameComesNext) {
  EXPECT_EQ(closest_names("A100-80GB", kGpus)[0], "A100-SXM4-80GB");
  EXPECT_EQ(closest_names("H100-96GB", kGpus)[0], "H100-SXM5-96GB");
}

TEST(ClosestNames, ATypoFallsBackToEditDistance) {
  EXPECT_EQ(closest_names("L40S-48G", kGpus)[0], "L40S-48GB");
  EXPECT_EQ(closest_names("V100-SMX2-32GB", kGpus)[0], "V100-SXM2-32GB");
  EXPECT_EQ(closest_names("", kGpus).size(), 3u);
  EXPECT_EQ(closest_names("x", {}, 3).size(), 0u);
  EXPECT_EQ(closest_names("H100", kGpus, 1).size(), 1u);
}

}  // namespace
}  // namespace mist
