// The Pareto front of points where less is better in both coordinates.
#pragma once

#include <utility>
#include <vector>

namespace mist::html {

// front[i]: no other point has x <= x_i and y <= y_i with one of them strictly less (points equal
// in both are both kept). O(n log n).
std::vector<bool> pareto_front(const std::vector<std::pair<double, double>>& pts);

}  // namespace mist::html
