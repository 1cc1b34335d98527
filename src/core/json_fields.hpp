// Reading JSON objects field by field with validation. Each accessor names the field by its full
// path in the error, checks the JSON type and the allowed range, and never throws.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/result.hpp"

namespace mist {

using Json = nlohmann::json;

// Parses JSON text; the error names `what` (a file path or "--model") and the line/column.
Result<Json> parse_json_text(std::string_view text, const std::string& what);
// Reads a file and parses it; a missing file is an error naming the path.
Result<Json> read_json_file(const std::string& path);

// A view of one JSON object at `path` ("cluster", "plan.stages[0]").
class JsonFields {
 public:
  static Result<JsonFields> of(const Json& j, std::string path);

  const std::string& path() const { return path_; }
  std::string field_path(std::string_view key) const;
  bool has(std::string_view key) const;
  const Json& raw(std::string_view key) const { return obj_->at(std::string(key)); }

  // Integers: must be JSON integers (not 1.5, not "8") within [lo, hi].
  Result<int64_t> integer(std::string_view key, int64_t lo, int64_t hi) const;
  Result<int64_t> integer_or(std::string_view key, int64_t fallback, int64_t lo, int64_t hi) const;
  // Numbers: finite, within [lo, hi].
  Result<double> number(std::string_view key, double lo, double hi) const;
  Result<double> number_or(std::string_view key, double fallback, double lo, double hi) const;
  Result<std::optional<double>> optional_number(std::string_view key, double lo, double hi) const;
  Result<bool> boolean(std::string_view key) const;
  Result<bool> boolean_or(std::string_view key, bool fallback) const;
  Result<std::string> string(std::string_view key) const;
  Result<std::string> string_or(std::string_view key, std::string fallback) const;
  // A string that must be one of `allowed`.
  Result<std::string> choice(std::string_view key, std::initializer_list<std::string_view> allowed) const;
  Result<std::string> choice_or(std::string_view key, std::string fallback,
                                std::initializer_list<std::string_view> allowed) const;
  // A list of strings, each one of `allowed`, none twice; the error names the element ("x[1]").
  Result<std::vector<std::string>> choices(std::string_view key, std::span<const std::string_view> allowed) const;

  // Rejects keys not in `known` (catches typos such as "micro_batch"); names the first stray key.
  Result<void> reject_unknown(std::initializer_list<std::string_view> known) const;

 private:
  JsonFields(const Json* obj, std::string path) : obj_(obj), path_(std::move(path)) {}
  Result<const Json*> required(std::string_view key) const;

  const Json* obj_;
  std::string path_;
};

// Loads `file` and converts it with `from_json(json, root)`; a conversion error keeps its field
// path ("cluster.nodes") and says which file it came from.
template <class F>
auto load_json_as(const std::string& file, const std::string& root, F from_json)
    -> decltype(from_json(std::declval<const Json&>(), root)) {
  auto j = read_json_file(file);
  if (!j) return std::unexpected(j.error());
  auto r = from_json(*j, root);
  if (!r) r.error().message += " (in " + file + ")";
  return r;
}

// "a, b, c" for error messages.
std::string join(const std::vector<std::string>& items, std::string_view sep = ", ");

}  // namespace mist
