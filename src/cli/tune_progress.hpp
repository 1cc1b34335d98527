// `mist tune`'s progress on stderr: which search runs, how far it is, the time spent and an
// estimate of the time left, and the best plan so far. Shown when stderr is a terminal (one line,
// redrawn) or when asked (--progress: a line at most every second); nothing otherwise.
#pragma once

#include <functional>

#include "api/tune.hpp"

namespace mist::cli {

// The display for api::TuneRequest::progress; `redraw`: stderr is a terminal.
std::function<void(const api::TuneProgress&)> tune_progress(bool redraw);

}  // namespace mist::cli
