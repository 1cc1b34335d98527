#include "cli/tune_progress.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>

#include <fmt/format.h>

#include "cli/plan_text.hpp"
#include "cli/report.hpp"

namespace mist::cli {

namespace {

using Clock = std::chrono::steady_clock;

size_t terminal_width() {
  winsize w{};
  if (ioctl(STDERR_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col > 20) return w.ws_col;
  return 100;
}

struct State {
  bool redraw = false;
  Clock::time_point search_start = Clock::now(), round_start = search_start, last_line{};
  std::string search;
  int round = 0;
};

// "[#####     ]  45% mist: 0.4 s, ~0.5 s left; best so far 24.010 s dp 8 tp 2 ..."
std::string line(const State& s, const api::TuneProgress& p) {
  const auto now = Clock::now();
  const double spent = std::chrono::duration<double>(now - s.search_start).count();
  const double in_round = std::chrono::duration<double>(now - s.round_start).count();
  const double f = p.at.fraction;
  const int width = 20, filled = static_cast<int>(f * width);
  std::string out = fmt::format("[{}{}] {:3.0f}% {}{}: {:.1f} s", std::string(static_cast<size_t>(filled), '#'),
                                std::string(static_cast<size_t>(width - filled), ' '), 100 * f, p.search,
                                p.at.round > 0 ? fmt::format(" (round {}, more memory left free)", p.at.round + 1)
                                               : "",
                                spent);
  // The layouts left cost about what the ones visited cost each (they are visited fastest-first and
  // the bound skips more of them near the end: an overestimate).
  if (f > 0.02 && f < 1) out += fmt::format(", ~{:.1f} s left", in_round * (1 - f) / f);
  if (p.at.best)
    out += fmt::format("; best so far {} {}", format_seconds(p.at.best_time_s), plan_compact(*p.at.best));
  return out;
}

}  // namespace

std::function<void(const api::TuneProgress&)> tune_progress(bool redraw) {
  auto state = std::make_shared<State>();
  state->redraw = redraw;
  return [state](const api::TuneProgress& p) {
    State& s = *state;
    const auto now = Clock::now();
    if (p.search != s.search) s.search = p.search, s.search_start = s.round_start = now, s.round = 0;
    if (p.at.round != s.round) s.round = p.at.round, s.round_start = now;
    const bool done = p.at.fraction >= 1;
    if (s.redraw) {
      std::string text = line(s, p);
      const size_t width = terminal_width() - 1;
      if (text.size() > width) text.resize(width);
      std::fprintf(stderr, "\r%-*s", static_cast<int>(width), text.c_str());
      if (done) std::fprintf(stderr, "\r%*s\r", static_cast<int>(width), "");
    } else if (done || now - s.last_line >= std::chrono::seconds(1)) {
      s.last_line = now;
      std::fprintf(stderr, "mist: %s\n", line(s, p).c_str());
    }
    std::fflush(stderr);
  };
}

}  // namespace mist::cli
