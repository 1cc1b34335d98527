// GPU rental prices for `mist gpus`: US$ per GPU-hour with the date and source of each. The
// default table is data/prices.json (compiled in); a --prices file of the same form replaces
// entries GPU by GPU. A GPU with no entry has no price: its cost columns stay empty.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/json_fields.hpp"

namespace mist::advisor {

struct GpuPrice {
  std::string gpu;              // catalog name, e.g. "H100-SXM5-80GB"
  double usd_per_gpu_hour = 0;  // on-demand, one GPU (instance price / GPUs in the instance)
  std::string date;             // when the price was quoted, YYYY-MM-DD
  std::string source;           // where it comes from (URL, provider, instance)
  // Optional: the instance priced ("AWS p5.48xlarge") and how many GPUs it holds (8: an 8-GPU
  // instance's price ÷ 8; 1: a single-GPU instance); "" and 0 when the file does not say.
  std::string instance = {};
  int64_t gpus_per_instance = 0;

  bool operator==(const GpuPrice&) const = default;
};

// A JSON array of {"gpu", "usd_per_gpu_hour", "date", "source"[, "instance", "gpus_per_instance"]};
// `what` names it in errors
// ("prices.json[2].usd_per_gpu_hour: must be positive"). GPUs must be catalog names, each once.
Result<std::vector<GpuPrice>> prices_from_json(const Json& j, const std::string& what);
Result<std::vector<GpuPrice>> load_prices(const std::string& path);
// data/prices.json, parsed once.
const Result<std::vector<GpuPrice>>& default_prices();

// `base` with every entry of `overrides` replacing (or adding) the entry of its GPU.
std::vector<GpuPrice> merge_prices(std::vector<GpuPrice> base, const std::vector<GpuPrice>& overrides);
std::optional<GpuPrice> find_price(const std::vector<GpuPrice>& prices, const std::string& gpu);

}  // namespace mist::advisor
