#include "html/report.hpp"

#include <fmt/format.h>

#include "html/svg.hpp"

namespace mist::html {

namespace {

// Colour-blind-safe (Tableau 10); the five memory terms, the timeline's kinds, the scatter's marks.
constexpr const char* kStyle = R"(
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; color: #222;
       margin: 24px auto; max-width: 1000px; padding: 0 16px; }
h1 { font-size: 22px; margin: 0 0 12px; }
h2 { font-size: 17px; margin: 28px 0 6px; }
dl#summary { display: grid; grid-template-columns: max-content 1fr; gap: 2px 16px; margin: 0; }
dl#summary dt { font-weight: 600; color: #555; }
dl#summary dd { margin: 0; }
p.note { color: #555; margin: 4px 0 0; }
svg.plot { display: block; max-width: 100%; height: auto; background: #fff; }
svg text { font-family: inherit; font-size: 12px; fill: #333; }
.plot-title { font-size: 14px; font-weight: 600; }
.axis-label { text-anchor: middle; }
.x-tick, .value, .peak-label, .block-label { text-anchor: middle; }
.y-tick, .stage-label, .capacity-label, .marker-label, .to-left { text-anchor: end; }
.grid { stroke: #e6e6e6; }
.frame { fill: none; stroke: #999; }
.value { fill: #fff; font-size: 11px; }
.block-label { fill: #fff; font-size: 10px; }
.seg-0 { fill: #4e79a7; } .seg-1 { fill: #f28e2b; } .seg-2 { fill: #e15759; } .seg-3 { fill: #59a14f; }
.seg-4 { fill: #9c755f; } .seg-5 { fill: #bab0ac; }
.stage.over .bar { stroke: #d62728; stroke-width: 2; }
.headroom { fill: #d62728; fill-opacity: 0.12; stroke: none; }
line.capacity, .marker.capacity { stroke: #d62728; stroke-width: 2; stroke-dasharray: 6 4; }
.capacity-label, .marker-label { fill: #d62728; }
.forward { fill: #4e79a7; } .backward { fill: #f28e2b; } .comm { fill: #9c9c9c; } .copy { fill: #59a14f; }
.point, .point-swatch { fill: #4e79a7; fill-opacity: 0.45; }
.point.front, .front-swatch { fill: #e15759; fill-opacity: 1; }
.front-line { fill: none; stroke: #e15759; stroke-width: 1.5; }
.chosen, .chosen-swatch { fill: #f1ce63; stroke: #222; stroke-width: 1.5; }
.chosen-label { font-weight: 600; }
.point-label { font-size: 11px; fill: #444; }
table { border-collapse: collapse; margin-top: 6px; font-size: 13px; }
th, td { border-bottom: 1px solid #ddd; padding: 3px 10px; text-align: right; white-space: nowrap; }
th:last-child, td:last-child { white-space: normal; }
th:last-child, td:last-child { text-align: left; }
caption { text-align: left; font-weight: 600; padding: 4px 0; }
footer { margin-top: 28px; color: #888; font-size: 12px; }
)";

std::string section(const std::string& id, const std::string& heading, const std::string& svg,
                    const std::string& note) {
  std::string out = fmt::format("<section id=\"{}-section\">\n<h2>{}</h2>\n{}", id, escape(heading), svg);
  if (!note.empty()) out += fmt::format("<p class=\"note\">{}</p>\n", escape(note));
  return out + "</section>\n";
}

std::string table(const Table& t) {
  std::string out = fmt::format("<table id=\"{}\">\n<caption>{}</caption>\n<thead><tr>", escape(t.id), escape(t.caption));
  for (const auto& h : t.header) out += "<th>" + escape(h) + "</th>";
  out += "</tr></thead>\n<tbody>\n";
  for (const auto& row : t.rows) {
    out += "<tr>";
    for (const auto& cell : row) out += "<td>" + escape(cell) + "</td>";
    out += "</tr>\n";
  }
  return out + "</tbody>\n</table>\n";
}

}  // namespace

std::string render(const Report& r) {
  std::string out = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>{0}</title>\n"
      "<style>{1}</style>\n</head>\n<body>\n<header>\n<h1>{0}</h1>\n<dl id=\"summary\">\n",
      escape(r.title), kStyle);
  for (const auto& [key, value] : r.summary) out += fmt::format("<dt>{}</dt><dd>{}</dd>\n", escape(key), escape(value));
  out += "</dl>\n</header>\n<main>\n";
  if (r.memory) out += section("memory", "Memory per stage", memory_svg(*r.memory), r.memory->note);
  if (!r.timelines.empty()) {
    std::string svgs, notes;
    for (const auto& t : r.timelines) {
      svgs += timeline_svg(t);
      notes += (notes.empty() || t.note.empty() ? "" : " ") + t.note;
    }
    out += section("timeline", "Pipeline timeline", svgs, notes);
  }
  if (r.candidates) out += section("candidates", "Tuner candidates", candidates_svg(*r.candidates), r.candidates->note);
  if (r.gpus) out += section("gpus", "GPU comparison", gpus_svg(*r.gpus), r.gpus->note);
  for (const auto& t : r.tables) out += table(t);
  out += fmt::format("</main>\n<footer>{}</footer>\n</body>\n</html>\n", escape(r.generator));
  return out;
}

}  // namespace mist::html
