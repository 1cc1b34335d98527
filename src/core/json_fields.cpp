#include "core/json_fields.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace mist {

namespace {

std::string type_name(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::string: return "a string";
    case Json::value_t::array: return "an array";
    case Json::value_t::object: return "an object";
    case Json::value_t::number_float: return "a non-integer number";
    default: return "a number";
  }
}

std::string show(double v) { return fmt::format("{:g}", v); }

}  // namespace

Result<Json> parse_json_text(std::string_view text, const std::string& what) {
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::parse_error& e) {
    // nlohmann's message carries "line L, column C"; keep it, drop the exception id prefix.
    std::string msg = e.what();
    if (auto pos = msg.find("parse error"); pos != std::string::npos) msg = msg.substr(pos);
    return fail(what, "malformed JSON: " + msg);
  } catch (const Json::exception& e) {
    // A number beyond double's range ("1e400") is an out_of_range error, not a parse_error.
    std::string msg = e.what();
    if (auto pos = msg.find("] "); pos != std::string::npos) msg = msg.substr(pos + 2);
    return fail(what, "malformed JSON: " + msg);
  }
}

Result<Json> read_json_file(const std::string& path) {
  // An ifstream opens a directory and reads nothing, which would parse as "unexpected end of input".
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return fail(path, "is a directory, not a JSON file");
  std::ifstream in(path, std::ios::binary);
  if (!in) return fail(path, "cannot open file");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return fail(path, "cannot read file");
  return parse_json_text(ss.str(), path);
}

Result<JsonFields> JsonFields::of(const Json& j, std::string path) {
  if (!j.is_object())
    return fail(path, "expected a JSON object, got " + type_name(j));
  return JsonFields(&j, std::move(path));
}

std::string JsonFields::field_path(std::string_view key) const {
  return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
}

bool JsonFields::has(std::string_view key) const {
  auto it = obj_->find(std::string(key));
  return it != obj_->end() && !it->is_null();
}

Result<const Json*> JsonFields::required(std::string_view key) const {
  auto it = obj_->find(std::string(key));
  if (it == obj_->end() || it->is_null()) return fail(field_path(key), "is required but missing");
  return &*it;
}

Result<int64_t> JsonFields::integer(std::string_view key, int64_t lo, int64_t hi) const {
  MIST_TRY(const Json* v, required(key));
  // A whole number beyond what mist counts in (int64): out of range, whichever way JSON stored it
  // (above 2^64 the parser keeps a double, so 18446744073709551617 arrives as 1.84467e+19).
  auto out_of_range = [&](const std::string& got, bool negative) {
    return fail(field_path(key), negative ? fmt::format("out of range for an integer: must be at least {}, got {}", lo, got)
                                          : fmt::format("out of range for an integer: must be at most {}, got {}", hi, got));
  };
  int64_t x = 0;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      return out_of_range(std::to_string(v->get<uint64_t>()), false);
    x = v->get<int64_t>();
  } else if (v->is_number_float()) {
    double d = v->get<double>();
    // Accept 8.0 written for 8 (YAML/JSON writers do this), reject 1.5.
    if (!std::isfinite(d) || std::floor(d) != d)
      return fail(field_path(key), fmt::format("must be an integer, got {}", show(d)));
    if (std::fabs(d) > 9.0e15) return out_of_range(show(d), d < 0);
    x = static_cast<int64_t>(d);
  } else {
    return fail(field_path(key), "must be an integer, got " + type_name(*v));
  }
  if (x < lo) return fail(field_path(key), fmt::format("must be at least {}, got {}", lo, x));
  if (x > hi) return fail(field_path(key), fmt::format("must be at most {}, got {}", hi, x));
  return x;
}

Result<int64_t> JsonFields::integer_or(std::string_view key, int64_t fallback, int64_t lo,
                                       int64_t hi) const {
  if (!has(key)) return fallback;
  return integer(key, lo, hi);
}

Result<double> JsonFields::number(std::string_view key, double lo, double hi) const {
  MIST_TRY(const Json* v, required(key));
  if (!v->is_number()) return fail(field_path(key), "must be a number, got " + type_name(*v));
  double x = v->get<double>();
  if (!std::isfinite(x)) return fail(field_path(key), "must be a finite number");
  if (x < lo) return fail(field_path(key), fmt::format("must be at least {}, got {}", show(lo), show(x)));
  if (x > hi) return fail(field_path(key), fmt::format("must be at most {}, got {}", show(hi), show(x)));
  return x;
}

Result<double> JsonFields::number_or(std::string_view key, double fallback, double lo,
                                     double hi) const {
  if (!has(key)) return fallback;
  return number(key, lo, hi);
}

Result<std::optional<double>> JsonFields::optional_number(std::string_view key, double lo,
                                                          double hi) const {
  if (!has(key)) return std::optional<double>{};
  MIST_TRY(double x, number(key, lo, hi));
  return std::optional<double>{x};
}

Result<bool> JsonFields::boolean(std::string_view key) const {
  MIST_TRY(const Json* v, required(key));
  if (!v->is_boolean()) return fail(field_path(key), "must be true or false, got " + type_name(*v));
  return v->get<bool>();
}

Result<bool> JsonFields::boolean_or(std::string_view key, bool fallback) const {
  if (!has(key)) return fallback;
  return boolean(key);
}

Result<std::string> JsonFields::string(std::string_view key) const {
  MIST_TRY(const Json* v, required(key));
  if (!v->is_string()) return fail(field_path(key), "must be a string, got " + type_name(*v));
  return v->get<std::string>();
}

Result<std::string> JsonFields::string_or(std::string_view key, std::string fallback) const {
  if (!has(key)) return fallback;
  return string(key);
}

Result<std::string> JsonFields::choice(std::string_view key,
                                       std::initializer_list<std::string_view> allowed) const {
  MIST_TRY(std::string s, string(key));
  std::vector<std::string> names;
  for (auto a : allowed) {
    if (s == a) return s;
    names.emplace_back(fmt::format("\"{}\"", a));
  }
  return fail(field_path(key), fmt::format("must be one of {}, got \"{}\"", join(names), s));
}

Result<std::string> JsonFields::choice_or(std::string_view key, std::string fallback,
                                          std::initializer_list<std::string_view> allowed) const {
  if (!has(key)) return fallback;
  return choice(key, allowed);
}

Result<std::vector<std::string>> JsonFields::choices(std::string_view key,
                                                    std::span<const std::string_view> allowed) const {
  MIST_TRY(const Json* v, required(key));
  if (!v->is_array()) return fail(field_path(key), "must be a list of strings, got " + type_name(*v));
  std::vector<std::string> names, out;
  for (auto a : allowed) names.emplace_back(fmt::format("\"{}\"", a));
  for (size_t i = 0; i < v->size(); ++i) {
    const std::string where = fmt::format("{}[{}]", field_path(key), i);
    const Json& e = (*v)[i];
    if (!e.is_string()) return fail(where, "must be a string, got " + type_name(e));
    const auto s = e.get<std::string>();
    bool known = false;
    for (auto a : allowed) known = known || s == a;
    if (!known) return fail(where, fmt::format("must be one of {}, got \"{}\"", join(names), s));
    for (const auto& earlier : out)
      if (earlier == s) return fail(where, fmt::format("\"{}\" is listed twice", s));
    out.push_back(s);
  }
  return out;
}

Result<void> JsonFields::reject_unknown(std::initializer_list<std::string_view> known) const {
  for (auto it = obj_->begin(); it != obj_->end(); ++it) {
    bool ok = false;
    for (auto k : known) ok = ok || it.key() == k;
    if (!ok) {
      std::vector<std::string> names;
      for (auto k : known) names.emplace_back(k);
      return fail(field_path(it.key()), "unknown field (known fields: " + join(names) + ")");
    }
  }
  return {};
}

std::string join(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += sep;
    out += items[i];
  }
  return out;
}

}  // namespace mist
