#include "html/scatter.hpp"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "html/svg.hpp"

namespace mist::html {

namespace {

// The range the axis spans: the data (and the markers), padded, from zero when asked.
std::pair<double, double> range(std::vector<double> v, bool from_zero) {
  if (v.empty()) return {0, 1};
  double lo = *std::min_element(v.begin(), v.end()), hi = *std::max_element(v.begin(), v.end());
  const double pad = hi > lo ? 0.06 * (hi - lo) : std::max(1e-9, 0.1 * std::abs(hi));
  lo = from_zero ? std::min(0.0, lo) : lo - pad;
  hi += pad;
  return {lo, hi};
}

std::string point_text(const ScatterPoint& p, double px, double py) {
  return fmt::format("<circle class=\"point{}{}\" cx=\"{}\" cy=\"{}\" r=\"{}\"><title>{} ({:.4g}, {:.4g})</title></circle>\n",
                     p.front ? " front" : "", p.chosen ? " is-chosen" : "", num(px), num(py), p.front ? 5 : 3.5,
                     escape(p.label), p.x, p.y);
}

}  // namespace

std::string scatter_svg(const Scatter& s) {
  Frame f;
  f.height = 460;
  std::vector<double> xs, ys;
  for (const auto& p : s.points) xs.push_back(p.x), ys.push_back(p.y);
  for (const auto& m : s.markers) xs.push_back(m.x);
  const auto [xlo, xhi] = range(xs, s.x_from_zero);
  const auto [ylo, yhi] = range(ys, s.y_from_zero);
  const auto xticks = nice_ticks(xlo, xhi), yticks = nice_ticks(ylo, yhi);
  const Scale x{xticks.front(), xticks.back(), f.x0(), f.x1()};
  const Scale y{yticks.front(), yticks.back(), f.y0(), f.y1()};
  std::string out = svg_open(s.id, f, s.title);
  out += axes(f, x, xticks, s.xlabel, y, yticks, s.ylabel);
  std::vector<std::pair<std::string, std::string>> entries = {{"point-swatch", s.point_name},
                                                               {"front-swatch", s.front_name}};
  if (std::any_of(s.points.begin(), s.points.end(), [](const auto& p) { return p.chosen; }))
    entries.emplace_back("chosen-swatch", "chosen");
  out += legend(f, entries);
  for (const auto& m : s.markers) {
    if (m.band_from)
      out += fmt::format("<rect class=\"band headroom\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"/>\n",
                         num(x(*m.band_from)), num(f.y1()), num(std::max(0.0, x(m.x) - x(*m.band_from))),
                         num(f.y0() - f.y1()));
    out += fmt::format("<line class=\"marker {0}\" x1=\"{1}\" y1=\"{2}\" x2=\"{1}\" y2=\"{3}\"/>"
                       "<text class=\"marker-label\" x=\"{4}\" y=\"{5}\">{6}</text>\n",
                       m.css, num(x(m.x)), num(f.y1()), num(f.y0()), num(x(m.x) - 4), num(f.y1() + 14), escape(m.label));
  }
  // The front as a staircase: from each front point right to the next one's x, then down to it.
  std::vector<const ScatterPoint*> front;
  for (const auto& p : s.points)
    if (p.front) front.push_back(&p);
  std::stable_sort(front.begin(), front.end(), [](const auto* a, const auto* b) { return a->x < b->x; });
  if (!front.empty()) {
    std::string d = fmt::format("M{} {}", num(x(front[0]->x)), num(y(front[0]->y)));
    for (size_t k = 1; k < front.size(); ++k) d += fmt::format(" H{} V{}", num(x(front[k]->x)), num(y(front[k]->y)));
    out += fmt::format("<path class=\"front-line\" d=\"{}\"/>\n", d);
  }
  for (const auto& p : s.points) {
    out += point_text(p, x(p.x), y(p.y));
    if (p.labelled && !p.chosen) {
      const bool left = x(p.x) > (f.x0() + f.x1()) / 2;  // the label on the side with more room
      out += fmt::format("<text class=\"point-label{}\" x=\"{}\" y=\"{}\">{}</text>\n", left ? " to-left" : "",
                         num(x(p.x) + (left ? -7 : 7)), num(y(p.y) - 6), escape(p.tag.empty() ? p.label : p.tag));
    }
  }
  for (const auto& p : s.points) {
    if (!p.chosen) continue;
    const double px = x(p.x), py = y(p.y);
    out += fmt::format("<path class=\"chosen\" d=\"M{} {} l9 9 l-9 9 l-9 -9 z\"><title>chosen: {}</title></path>\n",
                       num(px), num(py - 9), escape(p.label));
    // The label on the side with more room.
    const bool left = px > (f.x0() + f.x1()) / 2;
    out += fmt::format("<text class=\"chosen-label{}\" x=\"{}\" y=\"{}\">{}</text>\n", left ? " to-left" : "",
                       num(left ? px - 12 : px + 12), num(py - 10), escape(p.tag.empty() ? p.label : p.tag));
  }
  return out + "</svg>\n";
}

}  // namespace mist::html
