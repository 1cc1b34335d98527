// Reading engine command lines: shell-like splitting, then "--flag value" / "--flag=value" /
// "--switch" lookup with typed accessors whose errors name the flag.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.hpp"

namespace mist::engines {

// Splits like a POSIX shell: whitespace separates, '...' and "..." quote, backslash escapes,
// backslash-newline continues a line. `what` names the text in errors ("--from-megatron").
Result<std::vector<std::string>> split_command_line(std::string_view text, const std::string& what);

struct FlagSpec {
  std::string_view name;  // "--micro-batch-size"
  bool takes_value;
  bool several = false;  // takes every argument up to the next flag, none included (argparse's nargs='*')
};

class Flags {
 public:
  // Flags not in `known` are kept aside (unknown()); whether they take a value is guessed from
  // the next token. Words before the first flag (a launcher, a script) are ignored. A repeated
  // flag keeps its last value, as argparse does.
  static Result<Flags> parse(std::string_view text, std::span<const FlagSpec> known, const std::string& what);
  static Result<Flags> parse_tokens(const std::vector<std::string>& tokens, std::span<const FlagSpec> known);

  bool has(std::string_view name) const { return values_.contains(std::string(name)); }
  // A positive whole number within [lo, hi], if given.
  Result<std::optional<int64_t>> integer(std::string_view name, int64_t lo, int64_t hi) const;
  Result<std::optional<double>> number(std::string_view name, double lo, double hi) const;
  Result<std::optional<std::string>> choice(std::string_view name, std::initializer_list<std::string_view> allowed) const;
  std::optional<std::string> string(std::string_view name) const;
  // The arguments of a FlagSpec::several flag, if given (an empty list when it has none).
  std::optional<std::vector<std::string>> words(std::string_view name) const;
  // Flags given that `known` did not list, in order of appearance.
  const std::vector<std::string>& unknown() const { return unknown_; }

 private:
  Result<std::optional<std::string>> raw(std::string_view name) const;
  std::map<std::string, std::optional<std::string>> values_;
  std::vector<std::string> unknown_;
};

}  // namespace mist::engines
