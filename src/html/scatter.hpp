// A scatter plot of plans or cells with their Pareto front as a staircase and one point chosen:
// what the tuner's candidates chart and the GPU comparison chart draw.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace mist::html {

struct ScatterPoint {
  std::string label;    // the plan or cell, in its tooltip
  std::string tag;      // beside it when labelled or chosen ("": the label)
  double x = 0, y = 0;  // in the axes' units
  bool front = false;   // on the Pareto front (less is better in both)
  bool chosen = false;
  bool labelled = false;
};

// A vertical line at x (class `css`), with a shaded band (class "headroom") from `band_from` to x
// when it is set.
struct Marker {
  double x = 0;
  std::string css, label;
  std::optional<double> band_from;
};

struct Scatter {
  std::string id, title, xlabel, ylabel;
  std::string point_name = "candidate", front_name = "Pareto front";  // in the legend
  std::vector<ScatterPoint> points;
  std::vector<Marker> markers;
  bool x_from_zero = true, y_from_zero = false;
};

// <svg id=...>: <circle class="point"> per point ("point front" on the front), <path
// class="front-line"> through the front in x order, <path class="chosen"> on the chosen point
// with its label, <line class="marker CSS"> per marker.
std::string scatter_svg(const Scatter& s);

}  // namespace mist::html
