// The tuner's candidates: iteration time against peak memory per GPU, the frontier of plans no
// other is both faster and smaller than, the chosen plan, and the memory the GPU has.
#pragma once

#include <string>
#include <vector>

#include "html/scatter.hpp"

namespace mist::html {

struct CandidatePlan {
  std::string label;  // the plan in words
  std::string tag;    // a few words beside the chosen point
  double peak_bytes = 0, iteration_time_s = 0;
  bool chosen = false;
};

struct CandidatesChart {
  std::vector<CandidatePlan> plans;
  double capacity_bytes = 0, usable_bytes = 0;  // the GPU's memory, and what the headroom leaves
  std::string note;
};

// The chart as a scatter: x in GiB, y in seconds, the front computed (pareto_front), capacity and
// usable memory as markers with the headroom band between them.
Scatter candidates_scatter(const CandidatesChart& c);
// The plans on the frontier, by memory ascending.
std::vector<CandidatePlan> frontier(const CandidatesChart& c);
std::string candidates_svg(const CandidatesChart& c);  // <svg id="candidates">

}  // namespace mist::html
