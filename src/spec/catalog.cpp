// The built-in catalogs: data/models.json and data/gpus.json, embedded at build time and parsed
// once, on first use. A malformed catalog is reported by every lookup, never thrown.
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "spec/catalog.hpp"
#include "spec/cluster.hpp"
#include "spec/model.hpp"

namespace mist::spec {

namespace {

constexpr const char* kModelsFile = "data/models.json";
constexpr const char* kGpusFile = "data/gpus.json";

// Parses a JSON array of catalog entries with `parse(entry, path)`; names must be unique.
template <class T, class Parse>
Result<std::vector<T>> parse_catalog(std::string_view text, const char* file, Parse parse) {
  MIST_TRY(Json j, parse_json_text(text, file));
  if (!j.is_array()) return fail(file, "a catalog must be a JSON array of entries");
  std::vector<T> out;
  std::set<std::string> names;
  for (size_t i = 0; i < j.size(); ++i) {
    const std::string path = fmt::format("{}[{}]", file, i);
    MIST_TRY(T entry, parse(j[i], path));
    if (!names.insert(entry.name).second)
      return fail(path + ".name", "duplicate catalog name \"" + entry.name + "\"");
    out.push_back(std::move(entry));
  }
  return out;
}

Result<ModelSpec> parse_model_entry(const Json& e, const std::string& path) {
  // Catalog entries use mist's form (not HF configs) and must say where their shapes come from.
  if (!e.is_object() || !e.contains("family"))
    return fail(path, "catalog entries use mist's model form (with \"family\")");
  MIST_TRY(ModelSpec m, model_from_json(e, path));
  if (m.source.empty()) return fail(path + ".source", "a catalog entry must cite its source");
  return m;
}

Result<GpuSpec> parse_gpu_entry(const Json& e, const std::string& path) {
  MIST_TRY(GpuSpec g, detail::gpu_from_json(e, path, nullptr));
  if (g.source.empty()) return fail(path + ".source", "a catalog entry must cite its source");
  return g;
}

template <class T>
std::vector<std::string> names_of(const Result<std::vector<T>>& catalog) {
  std::vector<std::string> names;
  if (catalog)
    for (const auto& e : *catalog) names.push_back(e.name);
  return names;
}

template <class T>
Result<T> find(const Result<std::vector<T>>& catalog, const std::string& name, const char* what) {
  if (!catalog) return std::unexpected(catalog.error());
  for (const auto& e : *catalog)
    if (e.name == name) return e;
  return fail("",
              fmt::format("unknown {} \"{}\" (known: {})", what, name, join(names_of(catalog))));
}

}  // namespace

const Result<std::vector<ModelSpec>>& model_catalog() {
  // Function-local statics: parsed once, on first use (initialisation is thread-safe).
  static const Result<std::vector<ModelSpec>> kModels =
      parse_catalog<ModelSpec>(embedded::kModelsJson, kModelsFile, parse_model_entry);
  return kModels;
}

std::vector<std::string> model_catalog_names() { return names_of(model_catalog()); }

Result<ModelSpec> catalog_model(const std::string& name) {
  return find(model_catalog(), name, "model");
}

const Result<std::vector<GpuSpec>>& gpu_catalog() {
  static const Result<std::vector<GpuSpec>> kGpus =
      parse_catalog<GpuSpec>(embedded::kGpusJson, kGpusFile, parse_gpu_entry);
  return kGpus;
}

std::vector<std::string> gpu_catalog_names() { return names_of(gpu_catalog()); }

Result<GpuSpec> catalog_gpu(const std::string& name) { return find(gpu_catalog(), name, "GPU"); }

}  // namespace mist::spec
