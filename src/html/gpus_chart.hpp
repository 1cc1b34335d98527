// The GPU comparison: time to train against its cost, one point per (GPU type, count) that fits
// and has a price, the Pareto set (no cell both faster and cheaper) marked.
#pragma once

#include <string>
#include <vector>

#include "html/scatter.hpp"

namespace mist::html {

struct GpuCell {
  std::string label;  // "A100-SXM4-80GB × 16"
  double cost_usd = 0, time_to_train_s = 0;
  bool pareto = false;  // as the advisor marked it
};

struct GpusChart {
  std::vector<GpuCell> cells;
  std::string note;  // the cells left out (no fit, no price)
};

// x in US$, y in hours (days past 48 hours).
Scatter gpus_scatter(const GpusChart& c);
std::string gpus_svg(const GpusChart& c);  // <svg id="gpus">

}  // namespace mist::html
