// `mist fit --gemm-table FILE --gpu G`: the GEMM model's constants (the rate of large GEMMs, the
// tiles' fixed cost in k, the launch cost) from a measured sweep of GEMM shapes, such as a cuBLAS
// benchmark or XLA's GEMM performance table (docs/time-model.md, "GEMM efficiency and k").
#pragma once

#include <string>

namespace mist::cli {

struct FitGemmTableArgs {
  std::string table, gpu, dtype, out;
  bool json = false;
};

int run_fit_gemm_table(const FitGemmTableArgs& a, std::string& out, std::string& err);

}  // namespace mist::cli
