#include "html/svg.hpp"

#include <cmath>

#include <fmt/format.h>

namespace mist::html {

std::string escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string num(double v) {
  std::string s = fmt::format("{:.1f}", v);
  if (s.ends_with(".0")) s.resize(s.size() - 2);
  return s == "-0" ? "0" : s;
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  const double raw = (hi - lo) / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  std::vector<double> ticks;
  const double first = std::floor(lo / step + 1e-9), last = std::ceil(hi / step - 1e-9);
  for (double k = first; k <= last; ++k) ticks.push_back(k * step == 0 ? 0 : k * step);
  return ticks;
}

std::string tick_label(double v) {
  std::string s = fmt::format("{:.3f}", v);
  while (s.ends_with('0')) s.pop_back();
  if (s.ends_with('.')) s.pop_back();
  return s == "-0" ? "0" : s;
}

std::string svg_open(const std::string& id, const Frame& f, const std::string& title) {
  return fmt::format(
      "<svg id=\"{0}\" class=\"plot\" viewBox=\"0 0 {1} {2}\" width=\"{1}\" "
      "height=\"{2}\" role=\"img\" aria-labelledby=\"{0}-title\">\n<title id=\"{0}-title\">{3}</title>\n"
      "<text class=\"plot-title\" x=\"{4}\" y=\"20\">{3}</text>\n",
      id, num(f.width), num(f.height), escape(title), num(f.x0()));
}

std::string axes(const Frame& f, const Scale& x, const std::vector<double>& xticks, const std::string& xlabel,
                 const Scale& y, const std::vector<double>& yticks, const std::string& ylabel) {
  std::string out = "<g class=\"axes\">\n";
  for (double t : xticks) {
    const double px = x(t);
    out += fmt::format("<line class=\"grid\" x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\"/>"
                       "<text class=\"tick x-tick\" x=\"{0}\" y=\"{3}\">{4}</text>\n",
                       num(px), num(f.y1()), num(f.y0()), num(f.y0() + 16), tick_label(t));
  }
  for (double t : yticks) {
    const double py = y(t);
    out += fmt::format("<line class=\"grid\" x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\"/>"
                       "<text class=\"tick y-tick\" x=\"{3}\" y=\"{4}\">{5}</text>\n",
                       num(f.x0()), num(py), num(f.x1()), num(f.x0() - 6), num(py + 4), tick_label(t));
  }
  out += fmt::format("<rect class=\"frame\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"/>\n", num(f.x0()), num(f.y1()),
                     num(f.x1() - f.x0()), num(f.y0() - f.y1()));
  if (!xlabel.empty())
    out += fmt::format("<text class=\"axis-label x-label\" x=\"{}\" y=\"{}\">{}</text>\n", num((f.x0() + f.x1()) / 2),
                       num(f.height - 14), escape(xlabel));
  const double cy = (f.y0() + f.y1()) / 2;
  if (!ylabel.empty())
    out += fmt::format("<text class=\"axis-label y-label\" x=\"18\" y=\"{0}\" transform=\"rotate(-90 18 {0})\">{1}</text>\n",
                     num(cy), escape(ylabel));
  return out + "</g>\n";
}

std::string legend(const Frame& f, const std::vector<std::pair<std::string, std::string>>& entries) {
  std::string out = "<g class=\"legend\">\n";
  double x = f.x0();
  for (const auto& [cls, label] : entries) {
    out += fmt::format("<rect class=\"swatch {}\" x=\"{}\" y=\"30\" width=\"12\" height=\"12\"/>"
                       "<text class=\"legend-label\" x=\"{}\" y=\"40\">{}</text>\n",
                       cls, num(x), num(x + 16), escape(label));
    x += 28 + 7.0 * static_cast<double>(label.size());
  }
  return out + "</g>\n";
}

}  // namespace mist::html
