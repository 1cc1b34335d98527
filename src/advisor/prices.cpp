#include "advisor/prices.hpp"

#include <algorithm>
#include <regex>
#include <set>
#include <string_view>

#include <fmt/format.h>

#include "spec/cluster.hpp"

namespace mist::advisor {

namespace embedded {
extern const std::string_view kPricesJson;  // data/prices.json, from cmake/embed_json.cmake
}

namespace {

// No GPU rents for anything near this; catches a price per node or per month by mistake.
constexpr double kMaxUsdPerGpuHour = 1000;

Result<GpuPrice> price_from_json(const Json& j, const std::string& path) {
  MIST_TRY(JsonFields f, JsonFields::of(j, path));
  MIST_CHECK(f.reject_unknown({"gpu", "usd_per_gpu_hour", "date", "source", "instance", "gpus_per_instance"}));
  GpuPrice p;
  MIST_TRY(p.gpu, f.string("gpu"));
  if (auto g = spec::catalog_gpu(p.gpu); !g) return fail(f.field_path("gpu"), g.error().message);
  // number() already rejects NaN/inf and values above the bound; zero is not a price either.
  MIST_TRY(p.usd_per_gpu_hour, f.number("usd_per_gpu_hour", -1e300, kMaxUsdPerGpuHour));
  if (!(p.usd_per_gpu_hour > 0))
    return fail(f.field_path("usd_per_gpu_hour"), fmt::format("must be positive, got {:g}", p.usd_per_gpu_hour));
  MIST_TRY(p.date, f.string("date"));
  static const std::regex kDate(R"(\d{4}-\d{2}-\d{2})");
  if (!std::regex_match(p.date, kDate))
    return fail(f.field_path("date"), "must be a date YYYY-MM-DD, got \"" + p.date + "\"");
  MIST_TRY(p.source, f.string("source"));
  if (p.source.empty()) return fail(f.field_path("source"), "must say where the price comes from");
  MIST_TRY(p.instance, f.string_or("instance", ""));
  // 0 when not given; an instance holds 1..64 GPUs (8 for every HGX/DGX-style instance).
  if (f.has("gpus_per_instance")) {
    MIST_TRY(p.gpus_per_instance, f.integer("gpus_per_instance", 1, 64));
  }
  return p;
}

}  // namespace

Result<std::vector<GpuPrice>> prices_from_json(const Json& j, const std::string& what) {
  if (!j.is_array()) return fail(what, "must be a JSON array of {\"gpu\", \"usd_per_gpu_hour\", \"date\", \"source\"}");
  std::vector<GpuPrice> out;
  std::set<std::string> seen;
  for (size_t i = 0; i < j.size(); ++i) {
    const std::string path = fmt::format("{}[{}]", what, i);
    MIST_TRY(GpuPrice p, price_from_json(j[i], path));
    if (!seen.insert(p.gpu).second) return fail(path + ".gpu", "duplicate price for \"" + p.gpu + "\"");
    out.push_back(std::move(p));
  }
  return out;
}

Result<std::vector<GpuPrice>> load_prices(const std::string& path) {
  return load_json_as(path, "prices", prices_from_json);
}

const Result<std::vector<GpuPrice>>& default_prices() {
  static const Result<std::vector<GpuPrice>> kPrices = [] {
    auto j = parse_json_text(embedded::kPricesJson, "data/prices.json");
    if (!j) return Result<std::vector<GpuPrice>>(std::unexpected(j.error()));
    return prices_from_json(*j, "data/prices.json");
  }();
  return kPrices;
}

std::vector<GpuPrice> merge_prices(std::vector<GpuPrice> base, const std::vector<GpuPrice>& overrides) {
  for (const auto& o : overrides) {
    auto it = std::find_if(base.begin(), base.end(), [&](const GpuPrice& p) { return p.gpu == o.gpu; });
    if (it != base.end())
      *it = o;
    else
      base.push_back(o);
  }
  return base;
}

std::optional<GpuPrice> find_price(const std::vector<GpuPrice>& prices, const std::string& gpu) {
  for (const auto& p : prices)
    if (p.gpu == gpu) return p;
  return std::nullopt;
}

}  // namespace mist::advisor
