#include "html/pareto.hpp"

#include <algorithm>
#include <limits>
#include <numeric>

namespace mist::html {

std::vector<bool> pareto_front(const std::vector<std::pair<double, double>>& pts) {
  std::vector<size_t> order(pts.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return pts[a] < pts[b]; });
  std::vector<bool> front(pts.size(), false);
  double best_y = std::numeric_limits<double>::infinity();  // the least y at a smaller x
  for (size_t g = 0; g < order.size();) {
    // A run of equal x, by y ascending: its least y is on the front when it beats every smaller x,
    // and so is every point of the run equal to it.
    size_t end = g;
    while (end < order.size() && pts[order[end]].first == pts[order[g]].first) ++end;
    const double y = pts[order[g]].second;
    if (y < best_y) {
      for (size_t k = g; k < end && pts[order[k]].second == y; ++k) front[order[k]] = true;
      best_y = y;
    }
    g = end;
  }
  return front;
}

}  // namespace mist::html
