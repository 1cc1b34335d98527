// `mist fit --runs FILE [--test-runs FILE]`: calibrates the matmul efficiency of one GPU and software
// stack on published iteration times (calibration/published_runs.hpp).
#pragma once

#include <string>

namespace mist::cli {

struct FitRunsArgs {
  std::string runs, test_runs, out;
  bool json = false;
};

int run_fit_runs(const FitRunsArgs& a, std::string& out, std::string& err);

}  // namespace mist::cli
