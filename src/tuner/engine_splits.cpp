#include "tuner/engine_splits.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include "export/splits.hpp"

namespace mist::tuner {

namespace {

bool valid(const std::vector<int64_t>& split, int64_t v) {
  return std::all_of(split.begin(), split.end(), [&](int64_t l) { return l >= 1 && l % v == 0; });
}

void add(std::vector<std::vector<int64_t>>& out, std::vector<int64_t> split, int64_t v) {
  if (valid(split, v) && std::find(out.begin(), out.end(), split) == out.end()) out.push_back(std::move(split));
}

}  // namespace

std::vector<std::vector<int64_t>> engine_splits(const SearchSpace& space, int64_t L, int64_t pp, int64_t v,
                                                bool mixed_precision) {
  std::vector<std::vector<int64_t>> out;
  if (pp < 1 || L < pp) return out;
  v = std::max<int64_t>(1, v);
  if (pp == 1) {
    add(out, {L}, v);
    return out;
  }
  switch (space.split_rule) {
    case SplitRule::kEven:
      add(out, plan::even_split(L, pp), v);
      break;
    case SplitRule::kDeepSpeedPartition: {
      auto split = engines::deepspeed_pipe_layers(L, pp, mixed_precision);
      if (!split.empty()) add(out, std::move(split), v);
      break;
    }
    case SplitRule::kTorchtitanGenerated: {
      // pipeline_parallel.py: (L + first + last) weights spread evenly, the first and last stage
      // each `first`/`last` blocks fewer. With interleaving the capability model finds the
      // weights for the even split, or moves the plan to the nearest generated one.
      if (v > 1) {
        add(out, plan::even_split(L, pp), v);
        break;
      }
      std::vector<std::pair<int64_t, int64_t>> weights{{1, 1}};
      for (int64_t first = 0; first <= space.layer_slack + 1; ++first)
        for (int64_t last = 0; last <= space.layer_slack + 1; ++last) weights.emplace_back(first, last);
      for (auto [first, last] : weights) {
        auto split = engines::torchtitan_stage_layers(L, pp, first, last);
        if (!split.empty()) add(out, std::move(split), v);
      }
      break;
    }
    case SplitRule::kMegatronFirstLast: {
      add(out, plan::even_split(L, pp), v);
      const int64_t mid = std::llround(double(L) / double(pp));
      const int64_t lo = std::max<int64_t>(1, mid - space.layer_slack), hi = mid + space.layer_slack;
      for (int64_t first = lo; first <= hi; ++first) {
        if (pp == 2) {  // the last stage takes the rest
          add(out, {first, L - first}, v);
          continue;
        }
        for (int64_t last = lo; last <= hi; ++last) {
          const int64_t rest = L - first - last;
          if (rest < pp - 2 || rest % (pp - 2) != 0) continue;
          std::vector<int64_t> split(static_cast<size_t>(pp), rest / (pp - 2));
          split.front() = first;
          split.back() = last;
          add(out, std::move(split), v);
        }
      }
      break;
    }
  }
  return out;
}

}  // namespace mist::tuner
