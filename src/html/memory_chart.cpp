#include "html/memory_chart.hpp"

#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "core/units.hpp"
#include "html/svg.hpp"

namespace mist::html {

double peak_bytes(const StageMemoryBar& s) {
  double sum = 0;
  for (const auto& seg : s.segments) sum += seg.bytes;
  return sum;
}

namespace {

std::string gib(double bytes) { return fmt::format("{:.2f}", bytes / units::kGiB); }

// One stage's bar: its segments bottom-up, their values inside when there is room, the peak on top.
std::string stage_bar(const StageMemoryBar& s, double cx, double w, const Scale& y, double label_y) {
  const double peak = peak_bytes(s);
  std::string out = fmt::format("<g class=\"stage{}\" data-label=\"{}\" data-peak-bytes=\"{:.0f}\">\n",
                                peak > s.usable_bytes ? " over" : "", escape(s.label), peak);
  double base = 0;
  for (size_t k = 0; k < s.segments.size(); ++k) {
    const auto& seg = s.segments[k];
    const double top = base + std::max(0.0, seg.bytes);
    const double py0 = y(base), py1 = y(top);
    out += fmt::format("<rect class=\"bar seg-{}\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" data-bytes=\"{:.0f}\">"
                       "<title>{}: {} {} GiB</title></rect>\n",
                       k, num(cx - w / 2), num(py1), num(w), num(py0 - py1), seg.bytes, escape(s.label),
                       escape(seg.name), gib(seg.bytes));
    if (py0 - py1 >= 14 && w >= 44)
      out += fmt::format("<text class=\"value\" x=\"{}\" y=\"{}\">{}</text>\n", num(cx), num((py0 + py1) / 2 + 4),
                         gib(seg.bytes));
    base = top;
  }
  out += fmt::format("<text class=\"peak-label\" x=\"{}\" y=\"{}\">{} GiB</text>\n", num(cx), num(y(peak) - 5),
                     gib(peak));
  out += fmt::format("<text class=\"tick x-tick\" x=\"{}\" y=\"{}\">{}</text>\n</g>\n", num(cx), num(label_y), escape(s.label));
  return out;
}

}  // namespace

std::string memory_svg(const MemoryChart& c) {
  Frame f;
  f.height = 440;
  double top = 0, capacity = 0, usable = 0;
  for (const auto& s : c.stages) {
    top = std::max({top, peak_bytes(s), s.capacity_bytes});
    capacity = std::max(capacity, s.capacity_bytes);
    usable = usable == 0 ? s.usable_bytes : std::min(usable, s.usable_bytes);
  }
  const auto yticks = nice_ticks(0, std::max(1.0, top * 1.08 / units::kGiB));
  const Scale y{0, yticks.back() * units::kGiB, f.y0(), f.y1()};
  const Scale ylabels{0, yticks.back(), f.y0(), f.y1()};
  std::string out = svg_open("memory", f, "Memory per GPU at each stage's peak");
  out += axes(f, Scale{0, 1, f.x0(), f.x1()}, {}, "pipeline stage", ylabels, yticks, "GiB per GPU");
  std::vector<std::pair<std::string, std::string>> entries;
  if (!c.stages.empty())
    for (size_t k = 0; k < c.stages.front().segments.size(); ++k)
      entries.emplace_back(fmt::format("seg-{}", k), c.stages.front().segments[k].name);
  if (capacity > usable) entries.emplace_back("headroom", "headroom");
  out += legend(f, entries);
  if (capacity > 0) {
    const double pc = y(capacity), pu = y(usable);
    out += fmt::format("<rect class=\"headroom\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" data-bytes=\"{:.0f}\">"
                       "<title>headroom: {} GiB left free below the capacity</title></rect>\n",
                       num(f.x0()), num(pc), num(f.x1() - f.x0()), num(pu - pc), capacity - usable, gib(capacity - usable));
    out += fmt::format("<line class=\"capacity\" x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" data-bytes=\"{3:.0f}\"/>"
                       "<text class=\"capacity-label\" x=\"{2}\" y=\"{4}\">capacity {5} GiB{6}</text>\n",
                       num(f.x0()), num(pc), num(f.x1() - 4), capacity, num(pc - 5), gib(capacity),
                       capacity > usable ? ", usable " + gib(usable) + " GiB" : "");
  }
  const double n = static_cast<double>(std::max<size_t>(1, c.stages.size()));
  const double slot = (f.x1() - f.x0()) / n, w = std::min(90.0, slot * 0.6);
  for (size_t i = 0; i < c.stages.size(); ++i) {
    StageMemoryBar s = c.stages[i];
    if (slot < 60) s.label = std::to_string(i);  // "stage 12" would run into its neighbours
    out += stage_bar(s, f.x0() + slot * (static_cast<double>(i) + 0.5), w, y, f.y0() + 16);
  }
  return out + "</svg>\n";
}

}  // namespace mist::html
