// Per-stage memory at the peak as stacked bars (one segment per term) against the GPU's capacity,
// with the headroom the plan must leave free as a band below the capacity line.
#pragma once

#include <string>
#include <vector>

namespace mist::html {

struct MemorySegment {
  std::string name;  // "weights", "gradients", "optimizer states", "activations", "other"
  double bytes = 0;
};

struct StageMemoryBar {
  std::string label;                   // "stage 0" (its index alone under a narrow bar)
  std::vector<MemorySegment> segments;  // stacked bottom-up; they add up to the stage's peak
  double capacity_bytes = 0;           // the GPU's memory
  double usable_bytes = 0;             // the capacity less the headroom: what a fit is judged on
};

struct MemoryChart {
  std::vector<StageMemoryBar> stages;
  std::string note;  // under the chart: what the peak counts
};

double peak_bytes(const StageMemoryBar& s);  // the sum of its segments

// <svg id="memory">: a <g class="stage"> per stage holding one <rect class="bar seg-N"> per
// segment (data-bytes its value, heights proportional to it), a capacity line
// (<line class="capacity">) and a headroom band (<rect class="headroom">), values in GiB as text.
std::string memory_svg(const MemoryChart& c);

}  // namespace mist::html
