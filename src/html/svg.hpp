// What every chart of the report draws with: escaping, numbers, linear scales with round ticks,
// and the frame of a plot (title, axes, tick labels, axis labels) as SVG text.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace mist::html {

// Text for HTML or SVG content and attribute values: & < > " ' as entities.
std::string escape(std::string_view text);

// A coordinate with one decimal, "-0" written "0": short and stable output.
std::string num(double v);

// Round numbers between lo and hi, about `target` of them (1, 2 or 5 times a power of ten apart),
// the first <= lo and the last >= hi. lo < hi, both finite.
std::vector<double> nice_ticks(double lo, double hi, int target = 6);
// A tick value as a label: no trailing zeros, at most 3 significant decimals ("0.25", "120", "1.5").
std::string tick_label(double v);

// Maps [d0, d1] onto [r0, r1] (pixels); d0 != d1.
struct Scale {
  double d0 = 0, d1 = 1, r0 = 0, r1 = 1;
  double operator()(double v) const { return r0 + (v - d0) / (d1 - d0) * (r1 - r0); }
};

// The plotting area of a chart: the SVG is `width` x `height`, the data inside the margins.
struct Frame {
  double width = 960, height = 420;
  double left = 80, right = 30, top = 48, bottom = 60;
  double x0() const { return left; }
  double x1() const { return width - right; }
  double y0() const { return height - bottom; }  // the bottom of the area (SVG y grows downwards)
  double y1() const { return top; }
};

// `<svg id=.. class="plot" ...>` with its <title> and the title text; close with "</svg>\n".
std::string svg_open(const std::string& id, const Frame& f, const std::string& title);
// Grid lines, tick labels and axis labels for x and y ticks (already scaled by `x` and `y`).
std::string axes(const Frame& f, const Scale& x, const std::vector<double>& xticks, const std::string& xlabel,
                 const Scale& y, const std::vector<double>& yticks, const std::string& ylabel);
// One legend entry per (css class, label), laid out left to right above the plot area.
std::string legend(const Frame& f, const std::vector<std::pair<std::string, std::string>>& entries);

}  // namespace mist::html
