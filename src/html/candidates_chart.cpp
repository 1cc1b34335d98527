#include "html/candidates_chart.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "core/units.hpp"
#include "html/pareto.hpp"

namespace mist::html {

Scatter candidates_scatter(const CandidatesChart& c) {
  Scatter s;
  s.id = "candidates";
  s.title = "Tuner candidates: iteration time against peak memory";
  s.xlabel = "peak memory per GPU, worst stage (GiB)";
  s.ylabel = "iteration time (s)";
  s.point_name = "plan searched";
  s.x_from_zero = false;
  s.front_name = "frontier (no plan faster and smaller)";
  std::vector<std::pair<double, double>> xy;
  for (const auto& p : c.plans) xy.emplace_back(p.peak_bytes, p.iteration_time_s);
  const auto front = pareto_front(xy);
  for (size_t i = 0; i < c.plans.size(); ++i) {
    const auto& p = c.plans[i];
    s.points.push_back(ScatterPoint{.label = p.label,
                                    .tag = p.tag,
                                    .x = p.peak_bytes / units::kGiB,
                                    .y = p.iteration_time_s,
                                    .front = front[i],
                                    .chosen = p.chosen,
                                    .labelled = p.chosen});
  }
  if (c.capacity_bytes > 0)
    s.markers.push_back(Marker{.x = c.capacity_bytes / units::kGiB,
                               .css = "capacity",
                               .label = fmt::format("capacity {:.0f} GiB", c.capacity_bytes / units::kGiB),
                               .band_from = c.usable_bytes / units::kGiB});
  return s;
}

std::vector<CandidatePlan> frontier(const CandidatesChart& c) {
  std::vector<std::pair<double, double>> xy;
  for (const auto& p : c.plans) xy.emplace_back(p.peak_bytes, p.iteration_time_s);
  const auto front = pareto_front(xy);
  std::vector<CandidatePlan> out;
  for (size_t i = 0; i < c.plans.size(); ++i)
    if (front[i]) out.push_back(c.plans[i]);
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.peak_bytes < b.peak_bytes; });
  return out;
}

std::string candidates_svg(const CandidatesChart& c) { return scatter_svg(candidates_scatter(c)); }

}  // namespace mist::html
