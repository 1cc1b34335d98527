// The report's charts from plain values: what they draw is proportional to the values, the front and
// the chosen plan are marked, labels are escaped, and the page is self-contained.
#include <regex>

#include <gtest/gtest.h>

#include "core/units.hpp"
#include "html/report.hpp"

namespace mist::html {
namespace {

constexpr double kGiB = units::kGiB;

// Every value of attribute `attr` on the elements whose opening tag matches `tag_re`, in order.
std::vector<double> attrs(const std::string& svg, const std::string& tag_re, const std::string& attr) {
  std::vector<double> out;
  const std::regex tag("<" + tag_re + "[^>]*>");
  const std::regex value(" " + attr + "=\"([-0-9.]+)\"");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), tag); it != std::sregex_iterator(); ++it) {
    std::smatch m;
    const std::string t = it->str();
    if (std::regex_search(t, m, value)) out.push_back(std::stod(m[1]));
  }
  return out;
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (auto at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

MemoryChart two_stages() {
  MemoryChart c;
  for (int i = 0; i < 2; ++i)
    c.stages.push_back(StageMemoryBar{.label = "stage " + std::to_string(i),
                                      .segments = {{"weights", (3.0 + i) * kGiB},
                                                   {"gradients", 6.0 * kGiB},
                                                   {"optimizer states", 9.0 * kGiB},
                                                   {"activations", (20.0 - 8 * i) * kGiB},
                                                   {"other", 2.0 * kGiB}},
                                      .capacity_bytes = 80 * kGiB,
                                      .usable_bytes = 76 * kGiB});
  return c;
}

TEST(HtmlReport, MemoryBarHeightsAreProportionalToTheBytes) {
  const std::string svg = memory_svg(two_stages());
  EXPECT_NE(svg.find("<svg id=\"memory\""), std::string::npos);
  const auto heights = attrs(svg, "rect class=\"bar ", "height");
  const auto bytes = attrs(svg, "rect class=\"bar ", "data-bytes");
  ASSERT_EQ(heights.size(), 10u);
  ASSERT_EQ(bytes.size(), 10u);
  double sum_px = 0, sum_gib = 0;
  for (size_t i = 0; i < heights.size(); ++i) sum_px += heights[i], sum_gib += bytes[i] / kGiB;
  const double px_per_gib = sum_px / sum_gib;  // coordinates are rounded to 0.1 px
  for (size_t i = 0; i < heights.size(); ++i) EXPECT_NEAR(heights[i], bytes[i] / kGiB * px_per_gib, 0.15) << i;
  // The segments stack: each one's top is the next one's bottom.
  const auto ys = attrs(svg, "rect class=\"bar ", "y");
  for (size_t i = 1; i < 5; ++i) EXPECT_NEAR(ys[i - 1], ys[i] + heights[i], 0.11) << i;
  // The capacity line and the headroom band: 80 GiB, and 4 GiB below it.
  ASSERT_EQ(count(svg, "<line class=\"capacity\""), 1u);
  const double cap_y = attrs(svg, "line class=\"capacity\"", "y1")[0];
  const double bottom = ys[0] + heights[0];
  EXPECT_NEAR(bottom - cap_y, 80 * px_per_gib, 0.3);
  EXPECT_NEAR(attrs(svg, "rect class=\"headroom\"", "height")[0], 4 * px_per_gib, 0.15);
  // Values in GiB as text: the peak of stage 0 and a segment.
  EXPECT_NE(svg.find("40.00 GiB"), std::string::npos);
  EXPECT_NE(svg.find(">9.00<"), std::string::npos);
}

TEST(HtmlReport, AStageOverItsUsableMemoryIsMarked) {
  auto c = two_stages();
  c.stages[1].segments[3].bytes = 70 * kGiB;
  const std::string svg = memory_svg(c);
  EXPECT_EQ(count(svg, "<g class=\"stage over\""), 1u);
  EXPECT_EQ(count(svg, "<g class=\"stage\""), 1u);
}

TEST(HtmlReport, TimelineDrawsEveryBlockAtItsTime) {
  TimelineChart t;
  t.stages = 2;
  t.makespan_s = 4;
  t.blocks = {{0, BlockKind::kForward, "F0", 0, 1},
              {1, BlockKind::kForward, "F0", 1, 2},
              {1, BlockKind::kBackward, "B0", 2, 3},
              {0, BlockKind::kBackward, "B0", 3, 4},
              {1, BlockKind::kCommunication, "send B0", 3, 3.2}};
  const std::string svg = timeline_svg(t);
  EXPECT_EQ(count(svg, "class=\"block forward\""), 2u);
  EXPECT_EQ(count(svg, "class=\"block backward\""), 2u);
  EXPECT_EQ(count(svg, "class=\"block comm\""), 1u);
  const auto xs = attrs(svg, "rect class=\"block ", "x"), ws = attrs(svg, "rect class=\"block ", "width");
  ASSERT_EQ(xs.size(), 5u);
  const double px_per_s = ws[0];  // the first block lasts 1 s
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_NEAR(ws[i], px_per_s, 0.11);
    EXPECT_NEAR(xs[i] - xs[0], t.blocks[i].start_s * px_per_s, 0.11);
  }
  EXPECT_NE(svg.find("stage 1"), std::string::npos);
  // A window draws its part only.
  t.window_s = 2;
  const std::string zoom = timeline_svg(t);
  EXPECT_EQ(count(zoom, "<rect class=\"block "), 2u);
}

TEST(HtmlReport, CandidatesMarkTheFrontierAndTheChosenPlan) {
  CandidatesChart c;
  c.capacity_bytes = 80 * kGiB;
  c.usable_bytes = 76 * kGiB;
  c.plans = {{"a", "", 70 * kGiB, 10, false}, {"b", "chosen: b", 74 * kGiB, 9, true},
             {"c", "", 60 * kGiB, 12, false}, {"d", "", 72 * kGiB, 11, false},  // d: worse than a
             {"e", "", 65 * kGiB, 13, false}};                                    // e: worse than c
  const auto s = candidates_scatter(c);
  ASSERT_EQ(s.points.size(), 5u);
  EXPECT_EQ((std::vector<bool>{s.points[0].front, s.points[1].front, s.points[2].front, s.points[3].front,
                               s.points[4].front}),
            (std::vector<bool>{true, true, true, false, false}));
  const auto f = frontier(c);
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f[0].label, "c");
  EXPECT_EQ(f[2].label, "b");
  const std::string svg = candidates_svg(c);
  EXPECT_NE(svg.find("<svg id=\"candidates\""), std::string::npos);
  EXPECT_EQ(count(svg, "<circle class=\"point front"), 3u);
  EXPECT_EQ(count(svg, "<circle class=\"point"), 5u);
  EXPECT_EQ(count(svg, "<path class=\"chosen\""), 1u);
  EXPECT_EQ(count(svg, "<path class=\"front-line\""), 1u);
  EXPECT_EQ(count(svg, "<line class=\"marker capacity\""), 1u);
  EXPECT_NE(svg.find("chosen: b"), std::string::npos);
}

TEST(HtmlReport, GpusChartUsesTheAdvisorsParetoMarks) {
  GpusChart g;
  g.cells = {{"A × 8", 100, 3600 * 10, true}, {"A × 16", 200, 3600 * 5, true}, {"B × 8", 300, 3600 * 12, false}};
  const auto s = gpus_scatter(g);
  EXPECT_EQ(s.ylabel, "time to train (hours)");
  EXPECT_DOUBLE_EQ(s.points[1].y, 5);
  const std::string svg = gpus_svg(g);
  EXPECT_NE(svg.find("<svg id=\"gpus\""), std::string::npos);
  EXPECT_EQ(count(svg, "<circle class=\"point front"), 2u);
  EXPECT_EQ(count(svg, "class=\"point-label"), 3u);
  g.cells[0].time_to_train_s = 86400 * 3;
  EXPECT_EQ(gpus_scatter(g).ylabel, "time to train (days)");
}

Report full_report() {
  Report r;
  r.title = "mist <tune> & \"friends\"";
  r.summary = {{"model", "<script>alert('x')</script>"}, {"plan", "dp 2 × tp 4"}};
  r.memory = two_stages();
  r.memory->stages[0].label = "stage <0>";
  TimelineChart t;
  t.stages = 1;
  t.makespan_s = 1;
  t.blocks = {{0, BlockKind::kForward, "F<0>", 0, 0.5}};
  r.timelines = {t};
  CandidatesChart c;
  c.plans = {{"plan \"a\" & <b>", "", 10 * kGiB, 1, true}};
  c.capacity_bytes = 16 * kGiB;
  c.usable_bytes = 15 * kGiB;
  r.candidates = c;
  r.gpus = GpusChart{.cells = {{"GPU's × 8", 10, 100, true}}, .note = "a & b"};
  r.tables = {Table{.id = "t", .caption = "c<", .header = {"h&"}, .rows = {{"<cell>"}}}};
  r.generator = "mist";
  return r;
}

TEST(HtmlReport, ThePageIsSelfContainedAndEscapesEveryLabel) {
  const std::string page = render(full_report());
  EXPECT_TRUE(page.starts_with("<!DOCTYPE html>"));
  for (const char* id : {"<svg id=\"memory\"", "<svg id=\"timeline\"", "<svg id=\"candidates\"", "<svg id=\"gpus\"",
                         "<dl id=\"summary\">", "<table id=\"t\">"})
    EXPECT_EQ(count(page, id), 1u) << id;
  // Nothing to fetch and nothing to run.
  for (const char* bad : {"http://", "https://", "<script", " src=", "href=", "@import", "url("})
    EXPECT_EQ(page.find(bad), std::string::npos) << bad;
  EXPECT_NE(page.find("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"), std::string::npos);
  for (const char* raw : {"<0>", "<b>", "<cell>", "\"a\"", "GPU's", "F<0>", "c<", "h&<", "a & b"})
    EXPECT_EQ(page.find(raw), std::string::npos) << raw;
  EXPECT_NE(page.find("stage &lt;0&gt;"), std::string::npos);
  EXPECT_NE(page.find("plan &quot;a&quot; &amp; &lt;b&gt;"), std::string::npos);
  EXPECT_EQ(render(full_report()), page);  // deterministic
}

TEST(HtmlReport, SectionsAppearOnlyWhenSet) {
  Report r;
  r.title = "t";
  r.memory = two_stages();
  const std::string page = render(r);
  EXPECT_NE(page.find("id=\"memory\""), std::string::npos);
  for (const char* id : {"id=\"timeline\"", "id=\"candidates\"", "id=\"gpus\""})
    EXPECT_EQ(page.find(id), std::string::npos) << id;
}

}  // namespace
}  // namespace mist::html
