#include "html/gpus_chart.hpp"

#include <algorithm>

namespace mist::html {

Scatter gpus_scatter(const GpusChart& c) {
  double longest = 0;
  for (const auto& g : c.cells) longest = std::max(longest, g.time_to_train_s);
  const bool days = longest > 48 * 3600.0;
  const double per = days ? 86400.0 : 3600.0;
  Scatter s;
  s.id = "gpus";
  s.title = "GPU types and counts: time to train against its cost";
  s.xlabel = "cost to train (US$)";
  s.ylabel = days ? "time to train (days)" : "time to train (hours)";
  s.point_name = "GPU type × count";
  s.front_name = "Pareto set (none faster and cheaper)";
  s.x_from_zero = false;
  s.y_from_zero = true;
  for (const auto& g : c.cells)
    s.points.push_back(ScatterPoint{
        .label = g.label, .tag = {}, .x = g.cost_usd, .y = g.time_to_train_s / per, .front = g.pareto, .labelled = true});
  return s;
}

std::string gpus_svg(const GpusChart& c) { return scatter_svg(gpus_scatter(c)); }

}  // namespace mist::html
