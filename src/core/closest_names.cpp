#include "core/closest_names.hpp"

#include <algorithm>
#include <cctype>
#include <tuple>

namespace mist {

namespace {

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

// Levenshtein distance.
size_t distance(const std::string& x, const std::string& y) {
  std::vector<size_t> row(y.size() + 1);
  for (size_t j = 0; j <= y.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= x.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= y.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (x[i - 1] == y[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[y.size()];
}

bool contains_every_part(const std::string& name, const std::string& query) {
  size_t start = 0;
  bool any = false;
  while (start <= query.size()) {
    const size_t end = std::min(query.find('-', start), query.size());
    if (end > start) {
      if (name.find(query.substr(start, end - start)) == std::string::npos) return false;
      any = true;
    }
    start = end + 1;
  }
  return any;
}

}  // namespace

std::vector<std::string> closest_names(const std::string& query, std::vector<std::string> names, size_t n) {
  const std::string q = lower(query);
  auto key = [&](const std::string& name) {
    const std::string x = lower(name);
    const int match = !q.empty() && x.find(q) != std::string::npos ? 0 : contains_every_part(x, q) ? 1 : 2;
    return std::make_tuple(match, distance(q, x));
  };
  std::vector<std::pair<std::tuple<int, size_t>, std::string>> ranked;
  for (auto& name : names) ranked.emplace_back(key(name), std::move(name));
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> out;
  for (size_t i = 0; i < ranked.size() && i < n; ++i) out.push_back(std::move(ranked[i].second));
  return out;
}

}  // namespace mist
