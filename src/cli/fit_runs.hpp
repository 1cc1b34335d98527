// `mist fit --runs FILE [--test-runs FILE]`: calibrates the matmul efficiency of one GPU and software
// stack on published iteration times (calibration/published_runs.hpp).
#pragma once

#include <string>

namespace mist::cli {

struct FitRunsArgs {
  std::string runs, test_runs, out;
  bool json = false;
  bool host = false;            // --host: fit the stack's host cost per kernel too
  int64_t hold_out_half = -1;   // --hold-out-half SEED: fit on a half of --runs, score the other (-1: off)
};

int run_fit_runs(const FitRunsArgs& a, std::string& out, std::string& err);

}  // namespace mist::cli
