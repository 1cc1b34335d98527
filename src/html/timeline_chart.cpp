#include "html/timeline_chart.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "html/svg.hpp"

namespace mist::html {

const char* block_class(BlockKind k) {
  switch (k) {
    case BlockKind::kForward: return "forward";
    case BlockKind::kBackward: return "backward";
    case BlockKind::kCommunication: return "comm";
    case BlockKind::kCopy: return "copy";
  }
  return "?";
}

namespace {

struct TimeUnit {
  double scale;
  const char* name;
};

TimeUnit unit_for(double seconds) {
  if (seconds >= 2) return {1, "s"};
  if (seconds >= 2e-3) return {1e3, "ms"};
  return {1e6, "µs"};
}

constexpr double kComputeRow = 24, kCommRow = 8, kRowGap = 10;

}  // namespace

std::string timeline_svg(const TimelineChart& c) {
  Frame f;
  f.left = 70;
  const double row = kComputeRow + kCommRow + kRowGap;
  f.height = f.top + row * std::max(1, c.stages) + f.bottom;
  const double span = c.window_s > 0 ? std::min(c.window_s, c.makespan_s) : c.makespan_s;
  const TimeUnit u = unit_for(span);
  const auto xticks = nice_ticks(0, std::max(span * u.scale, 1e-9));
  const Scale x{0, xticks.back() / u.scale, f.x0(), f.x1()};
  const Scale xlabels{0, xticks.back(), f.x0(), f.x1()};
  std::string out = svg_open(c.id, f, c.title);
  out += axes(f, xlabels, xticks, fmt::format("time ({})", u.name), Scale{0, 1, f.y0(), f.y1()}, {}, "");
  out += legend(f, {{"forward", "forward"}, {"backward", "backward (recompute included)"},
                    {"comm", "p2p and collectives"}, {"copy", "offload copies"}});
  for (int i = 0; i < c.stages; ++i)
    out += fmt::format("<text class=\"stage-label\" x=\"{}\" y=\"{}\">stage {}</text>\n", num(f.x0() - 8),
                       num(f.y1() + row * i + kComputeRow / 2 + 4), i);
  const bool tooltips = c.blocks.size() <= kMaxTooltips;
  for (const auto& b : c.blocks) {
    if (b.start_s >= span && span < c.makespan_s) continue;
    const bool compute = b.kind == BlockKind::kForward || b.kind == BlockKind::kBackward;
    const double px0 = x(b.start_s), w = std::max(0.5, x(std::min(b.end_s, span)) - px0);
    const double py = f.y1() + row * b.stage + (compute ? 1 : kComputeRow + 1);
    const double h = (compute ? kComputeRow : kCommRow) - 2;
    out += fmt::format("<rect class=\"block {}\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\">", block_class(b.kind),
                       num(px0), num(py), num(w), num(h));
    if (tooltips)
      out += fmt::format("<title>stage {} {}: {:.4g} to {:.4g} {}</title>", b.stage, escape(b.name),
                         b.start_s * u.scale, b.end_s * u.scale, u.name);
    out += "</rect>\n";
    // The name inside when it fits (about 6.5 px a character at the block's font size).
    if (compute && w >= 6.5 * static_cast<double>(b.name.size()) + 4)
      out += fmt::format("<text class=\"block-label\" x=\"{}\" y=\"{}\">{}</text>\n", num(px0 + w / 2),
                         num(py + h / 2 + 4), escape(b.name));
  }
  return out + "</svg>\n";
}

}  // namespace mist::html
