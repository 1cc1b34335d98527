#include "cli/fit_output.hpp"

#include <ctime>
#include <fstream>

#include "cli/commands.hpp"
#include "cli/job.hpp"

namespace mist::cli {

Result<spec::Dtype> parse_dtype(const std::string& s) {
  if (s == "fp32") return spec::Dtype::kFp32;
  if (s == "bf16") return spec::Dtype::kBf16;
  if (s == "fp16") return spec::Dtype::kFp16;
  return fail("--dtype", "must be fp32, bf16 or fp16, got '" + s + "'");
}

std::string fit_date() {
  char date[16];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  return date;
}

std::optional<int> emit_constants(const Json& constants, const std::string& path, bool json, std::string& out,
                                  std::string& err) {
  if (!path.empty()) {
    std::ofstream f(path);
    f << constants.dump(2) << "\n";
    if (!f) return invalid_input(err, Error{"--out", "cannot write " + path});
  }
  if (!json) return std::nullopt;
  out = constants.dump(2) + "\n";
  return kExitOk;
}

}  // namespace mist::cli
