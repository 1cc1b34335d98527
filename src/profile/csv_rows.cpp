#include "profile/csv_rows.hpp"

#include <array>
#include <charconv>
#include <map>
#include <sstream>

#include <fmt/format.h>

namespace mist::profile {

namespace {

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  for (char ch : line) {
    if (ch == ',') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  out.push_back(cur);
  return out;
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  return s.substr(i);
}

Result<double> number(const std::string& s) {
  double v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty())
    return fail("", fmt::format("must be a number, got '{}'", s));
  return v;
}

Result<int64_t> integer(const std::string& s) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty())
    return fail("", fmt::format("must be a whole number, got '{}'", s));
  return v;
}

constexpr std::array<const char*, 12> kColumns = {"device", "op",    "kind",  "shape", "dtype",  "pass",
                                                  "median_s", "p10_s", "p90_s", "reps",  "source", "date"};

}  // namespace

Result<std::vector<Measurement>> parse_csv(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  int line_no = 0;
  std::map<std::string, size_t> col;
  size_t width = 0;
  std::vector<Measurement> rows;
  while (std::getline(in, line)) {
    ++line_no;
    line = trim(line);
    if (line.empty()) continue;
    if (line.find('"') != std::string::npos)
      return fail(fmt::format("line {}", line_no), "quoted fields are not supported (no field needs a comma)");
    auto fields = split(line);
    for (auto& f : fields) f = trim(f);
    if (col.empty()) {  // the header
      for (size_t i = 0; i < fields.size(); ++i)
        if (!col.emplace(fields[i], i).second)
          return fail(fmt::format("line {}.{}", line_no, fields[i]), "column named twice");
      for (const char* c : kColumns)
        if (!col.count(c)) return fail(fmt::format("line {}", line_no), fmt::format("the header lacks column '{}'", c));
      width = fields.size();
      continue;
    }
    if (fields.size() != width)
      return fail(fmt::format("line {}", line_no), fmt::format("has {} fields, the header {}", fields.size(), width));
    auto get = [&](const char* c) -> const std::string& { return fields[col.at(c)]; };
    auto where = [&](const std::string& c) { return fmt::format("line {}.{}", line_no, c); };
    Measurement m{get("device"), get("op"), get("shape"), get("dtype"), get("pass"), get("kind"), 0, 0, 0, 0,
                  get("source"), get("date")};
    for (auto [name, dst] : {std::pair{"median_s", &m.median_s}, {"p10_s", &m.p10_s}, {"p90_s", &m.p90_s}}) {
      auto v = number(get(name));
      if (!v) return fail(where(name), v.error().message);
      *dst = *v;
    }
    auto reps = integer(get("reps"));
    if (!reps) return fail(where("reps"), reps.error().message);
    m.reps = *reps;
    if (auto ok = validate(m); !ok) return fail(where(ok.error().path), ok.error().message);
    rows.push_back(std::move(m));
  }
  if (col.empty()) return fail("line 1", fmt::format("no header; expected '{}'", kCsvHeader));
  return rows;
}

std::string csv_line(const Measurement& m) {
  return fmt::format("{},{},{},{},{},{},{},{},{},{},{},{}", m.device, m.op, m.kind, m.shape, m.dtype,
                     m.pass, m.median_s, m.p10_s, m.p90_s, m.reps, m.source, m.date);
}

}  // namespace mist::profile
