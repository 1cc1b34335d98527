#include "export/flags.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "core/json_fields.hpp"

namespace mist::engines {

Result<std::vector<std::string>> split_command_line(std::string_view text, const std::string& what) {
  std::vector<std::string> tokens;
  std::string cur;
  bool in_token = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\\') {
      if (i + 1 < text.size() && text[i + 1] == '\n') {
        ++i;  // line continuation
      } else if (i + 1 < text.size()) {
        cur += text[++i];
        in_token = true;
      }
    } else if (c == '\'') {
      const size_t end = text.find('\'', i + 1);
      if (end == std::string_view::npos) return fail(what, "unterminated ' quote");
      cur += text.substr(i + 1, end - i - 1);
      in_token = true;
      i = end;
    } else if (c == '"') {
      size_t j = i + 1;
      for (; j < text.size() && text[j] != '"'; ++j) {
        if (text[j] == '\\' && j + 1 < text.size() && std::string_view("\"\\$`\n").find(text[j + 1]) != std::string_view::npos) {
          if (text[++j] != '\n') cur += text[j];
        } else {
          cur += text[j];
        }
      }
      if (j >= text.size()) return fail(what, "unterminated \" quote");
      in_token = true;
      i = j;
    } else if (std::isspace(static_cast<unsigned char>(c))) {
      if (in_token) tokens.push_back(std::move(cur));
      cur.clear();
      in_token = false;
    } else {
      cur += c;
      in_token = true;
    }
  }
  if (in_token) tokens.push_back(std::move(cur));
  return tokens;
}

namespace {

bool is_flag(const std::string& t) { return t.size() > 2 && t.starts_with("--"); }

}  // namespace

Result<Flags> Flags::parse(std::string_view text, std::span<const FlagSpec> known, const std::string& what) {
  MIST_TRY(auto tokens, split_command_line(text, what));
  return parse_tokens(tokens, known);
}

Result<Flags> Flags::parse_tokens(const std::vector<std::string>& tokens, std::span<const FlagSpec> known) {
  Flags f;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (!is_flag(tokens[i])) continue;  // a launcher, a script, a stray positional
    std::string name = tokens[i];
    std::optional<std::string> value;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
    }
    const FlagSpec* spec = nullptr;
    for (const auto& k : known)
      if (k.name == name) spec = &k;
    if (!spec) {
      if (!value && i + 1 < tokens.size() && !is_flag(tokens[i + 1])) ++i;  // its value, presumably
      if (std::find(f.unknown_.begin(), f.unknown_.end(), name) == f.unknown_.end()) f.unknown_.push_back(name);
      continue;
    }
    if (!spec->takes_value) {
      if (value) return fail(name, fmt::format("is a switch and takes no value, got '{}'", *value));
    } else if (spec->several && !value) {
      std::vector<std::string> words;
      while (i + 1 < tokens.size() && !is_flag(tokens[i + 1])) words.push_back(tokens[++i]);
      value = join(words, " ");
    } else if (!value) {
      if (i + 1 >= tokens.size() || is_flag(tokens[i + 1])) return fail(name, "expects a value");
      value = tokens[++i];
    }
    f.values_[name] = value;
  }
  return f;
}

Result<std::optional<std::string>> Flags::raw(std::string_view name) const {
  auto it = values_.find(std::string(name));
  if (it == values_.end()) return std::optional<std::string>{};
  return it->second;
}

Result<std::optional<int64_t>> Flags::integer(std::string_view name, int64_t lo, int64_t hi) const {
  MIST_TRY(auto s, raw(name));
  if (!s) return std::optional<int64_t>{};
  int64_t v = 0;
  const char* end = s->data() + s->size();
  auto [ptr, ec] = std::from_chars(s->data(), end, v);
  if (ec != std::errc() || ptr != end || s->empty())
    return fail(std::string(name), fmt::format("expects a whole number, got '{}'", *s));
  if (v < lo || v > hi)
    return fail(std::string(name), fmt::format("must be between {} and {}, got {}", lo, hi, v));
  return std::optional<int64_t>{v};
}

Result<std::optional<double>> Flags::number(std::string_view name, double lo, double hi) const {
  MIST_TRY(auto s, raw(name));
  if (!s) return std::optional<double>{};
  char* end = nullptr;
  const double v = std::strtod(s->c_str(), &end);
  if (s->empty() || end != s->c_str() + s->size() || !std::isfinite(v))
    return fail(std::string(name), fmt::format("expects a number, got '{}'", *s));
  if (v < lo || v > hi) return fail(std::string(name), fmt::format("must be between {} and {}, got {}", lo, hi, v));
  return std::optional<double>{v};
}

Result<std::optional<std::string>> Flags::choice(std::string_view name,
                                                 std::initializer_list<std::string_view> allowed) const {
  MIST_TRY(auto s, raw(name));
  if (!s) return s;
  for (auto a : allowed)
    if (*s == a) return s;
  std::vector<std::string> names(allowed.begin(), allowed.end());
  return fail(std::string(name), fmt::format("must be one of {}, got '{}'", join(names), *s));
}

std::optional<std::string> Flags::string(std::string_view name) const {
  auto it = values_.find(std::string(name));
  return it == values_.end() ? std::nullopt : it->second;
}

std::optional<std::vector<std::string>> Flags::words(std::string_view name) const {
  auto it = values_.find(std::string(name));
  if (it == values_.end()) return std::nullopt;
  std::vector<std::string> out;
  const std::string& s = it->second.value_or("");
  for (size_t i = 0; i < s.size();) {
    const size_t end = std::min(s.find(' ', i), s.size());
    if (end > i) out.push_back(s.substr(i, end - i));
    i = end + 1;
  }
  return out;
}

}  // namespace mist::engines
