// The HTML report (`--html FILE` on predict, simulate, tune and gpus; docs/report.md): one
// self-contained page, its charts inline SVG drawn here, no script, no external resource, so it
// opens offline and the same input gives the same bytes. It takes plain values; the command line
// fills them from the prediction, the simulation, the tuner and the GPU advisor.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "html/candidates_chart.hpp"
#include "html/gpus_chart.hpp"
#include "html/memory_chart.hpp"
#include "html/timeline_chart.hpp"

namespace mist::html {

// A table under the charts; its cells are text (escaped when written).
struct Table {
  std::string id, caption;
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
};

struct Report {
  std::string title;                                         // the page's <title> and <h1>
  std::vector<std::pair<std::string, std::string>> summary;  // the header: the job, the plan, the prediction
  std::optional<MemoryChart> memory;
  std::vector<TimelineChart> timelines;  // the whole iteration, perhaps a close-up of its start
  std::optional<CandidatesChart> candidates;
  std::optional<GpusChart> gpus;
  std::vector<Table> tables;
  std::string generator;  // "mist 0.1.0", in the footer
};

// The whole document: <!DOCTYPE html>, the style, the header (<dl id="summary">), one <section>
// per chart that is set, in the order of the members, then the tables.
std::string render(const Report& r);

}  // namespace mist::html
