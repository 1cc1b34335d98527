#include "export/splits.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <numeric>

#include <fmt/format.h>

namespace mist::engines {

namespace {

constexpr const char* kLayoutFlag = "--pipeline-model-parallel-layout";
constexpr size_t kMaxLayoutLength = 1'000'000;  // expanded characters; a typo like t*999999999 stops here

bool all_equal(const std::vector<int64_t>& v, size_t from, size_t to) {
  for (size_t i = from + 1; i < to; ++i)
    if (v[i] != v[from]) return false;
  return true;
}

// Reads the decimal count after "*" at s[i]; npos when there is none.
size_t read_count(std::string_view s, size_t i, int64_t& count) {
  if (i >= s.size() || s[i] != '*' || i + 1 >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i + 1])))
    return std::string_view::npos;
  size_t j = i + 1;
  count = 0;
  while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) {
    count = std::min<int64_t>(count * 10 + (s[j] - '0'), kMaxLayoutLength);
    ++j;
  }
  return j;
}

// One left-to-right pass of Megatron's two substitutions: "(body)*n" first, then "x*n".
Result<std::string> expand_layout(std::string_view in) {
  std::string s;
  for (char c : in)
    if (c != ',') s += c;  // commas are cosmetic
  std::string pass1;
  for (size_t i = 0; i < s.size();) {
    int64_t n = 0;
    size_t close = s[i] == '(' ? s.find(')', i + 1) : std::string::npos;
    size_t end = close != std::string::npos && close > i + 1 ? read_count(s, close + 1, n) : std::string::npos;
    if (end == std::string::npos) {
      pass1 += s[i++];
      continue;
    }
    for (int64_t k = 0; k < n && pass1.size() <= kMaxLayoutLength; ++k) pass1 += s.substr(i + 1, close - i - 1);
    i = end;
  }
  std::string out;
  for (size_t i = 0; i < pass1.size();) {
    int64_t n = 0;
    size_t end = read_count(pass1, i + 1, n);
    if (end == std::string::npos) {
      out += pass1[i++];
      continue;
    }
    out.append(static_cast<size_t>(std::min<int64_t>(n, kMaxLayoutLength)), pass1[i]);
    i = end;
    if (out.size() > kMaxLayoutLength) break;
  }
  if (out.size() > kMaxLayoutLength) return fail(kLayoutFlag, "expands to more than a million layers");
  return out;
}

}  // namespace

std::vector<int64_t> stage_totals(const ChunkLayers& chunks) {
  std::vector<int64_t> out;
  for (const auto& c : chunks) out.push_back(std::accumulate(c.begin(), c.end(), int64_t{0}));
  return out;
}

MegatronSplit megatron_split(const ChunkLayers& chunks, int64_t mtp) {
  MegatronSplit s;
  const size_t pp = chunks.size();
  if (pp == 0) return s;
  const size_t v = chunks[0].size();
  const std::vector<int64_t> layers = stage_totals(chunks);
  bool even = true;
  for (const auto& c : chunks) even = even && all_equal(c, 0, c.size());
  if (even) {
    if (pp <= 1 || all_equal(layers, 0, pp)) return s;
    if (pp == 2) {
      s.first = layers[0];  // the last stage takes the rest
      return s;
    }
    if (all_equal(layers, 1, pp - 1)) {
      if (layers[0] != layers[1]) s.first = layers[0];
      if (layers[pp - 1] != layers[1]) s.last = layers[pp - 1];
      return s;
    }
  } else if (mtp == 0) {
    // Megatron's accounting: every chunk of one size but the first stage's first and the last
    // stage's last, each one block shorter where the embedding (the loss) takes its place.
    int64_t per = 0;
    for (const auto& c : chunks) per = std::max(per, *std::max_element(c.begin(), c.end()));
    const bool emb = chunks[0][0] == per - 1, loss = chunks[pp - 1][v - 1] == per - 1;
    bool fits = true;
    for (size_t b = 0; b < pp; ++b)
      for (size_t a = 0; a < v; ++a)
        fits = fits && chunks[b][a] == per - ((emb && b == 0 && a == 0) ? 1 : 0) -
                                           ((loss && b == pp - 1 && a == v - 1) ? 1 : 0);
    if (fits) {
      s.account_embedding = emb;
      s.account_loss = loss;
      return s;
    }
  }
  // Entry a·pp + b is chunk a of stage b; the embedding opens the first entry, the loss closes the last.
  std::string layout;
  for (size_t a = 0; a < v; ++a)
    for (size_t b = 0; b < pp; ++b) {
      if (a + b > 0) layout += '|';
      if (a == 0 && b == 0) layout += 'E';
      if (chunks[b][a] > 0) layout += fmt::format("t*{}", chunks[b][a]);
      if (a == v - 1 && b == pp - 1) layout += std::string(static_cast<size_t>(mtp), 'm') + 'L';
    }
  s.layout = layout;
  return s;
}

MegatronSplit megatron_split(const std::vector<int64_t>& layers, int64_t v, int64_t mtp) {
  ChunkLayers chunks;
  for (int64_t n : layers) chunks.emplace_back(static_cast<size_t>(std::max<int64_t>(1, v)), n / std::max<int64_t>(1, v));
  return megatron_split(chunks, mtp);
}

Result<ChunkLayers> megatron_layers_accounting(int64_t num_layers, int64_t pp, bool embedding, bool loss,
                                               int64_t virtual_stages) {
  const char* flag = embedding ? "--account-for-embedding-in-pipeline-split" : "--account-for-loss-in-pipeline-split";
  const std::string counted_as = embedding && loss ? "the embedding and the loss" : embedding ? "the embedding" : "the loss";
  const int64_t counted = num_layers + (embedding ? 1 : 0) + (loss ? 1 : 0);
  if (counted % pp != 0)
    return fail(flag, fmt::format("the model's {} layers with {} counted as layers ({}) do not divide over {} stages "
                                  "(Megatron-LM asserts it)", num_layers, counted_as, counted, pp));
  const int64_t per = counted / pp;
  const int64_t v = pp > 1 ? std::max<int64_t>(1, virtual_stages) : 1;
  if (per % v != 0)
    return fail(flag, fmt::format("{} layers a stage do not split into {} virtual stages (Megatron-LM asserts it)",
                                  per, v));
  ChunkLayers out(static_cast<size_t>(pp), std::vector<int64_t>(static_cast<size_t>(v), per / v));
  if (embedding) out.front().front() -= 1;
  if (loss) out.back().back() -= 1;
  const auto totals = stage_totals(out);
  for (size_t i = 0; i < totals.size(); ++i)
    if (out[i].front() < 0 || out[i].back() < 0 || totals[i] < 1)
      return fail(flag, fmt::format("leaves stage {} without a block; mist's stages hold at least one", i));
  return out;
}

Result<std::vector<int64_t>> megatron_layers_from_first_last(int64_t num_layers, int64_t pp,
                                                             std::optional<int64_t> first,
                                                             std::optional<int64_t> last) {
  const char* flag = first ? "--decoder-first-pipeline-num-layers" : "--decoder-last-pipeline-num-layers";
  if (pp < 2) return fail(flag, "needs --pipeline-model-parallel-size of 2 or more");
  int64_t rest = num_layers, left = pp;
  if (first) rest -= *first, --left;
  if (last) rest -= *last, --left;
  if (rest < 0)
    return fail(flag, fmt::format("the first and last stages take more than the model's {} layers", num_layers));
  int64_t middle = 0;
  if (left > 0) {
    if (rest % left != 0)
      return fail(flag, fmt::format("the {} layers left must divide evenly over the {} other stages "
                                    "(Megatron requires it)", rest, left));
    middle = rest / left;
    if (middle == 0) return fail(flag, "leaves no layers for the middle stages");
  } else if (rest != 0) {
    return fail(flag, fmt::format("the first and last stages hold {} layers but the model has {}",
                                  num_layers - rest, num_layers));
  }
  std::vector<int64_t> layers(static_cast<size_t>(pp), middle);
  if (first) layers.front() = *first;
  if (last) layers.back() = *last;
  return layers;
}

Result<LayoutLayers> megatron_layers_from_layout(std::string_view layout, int64_t pp, int64_t num_layers,
                                                 int64_t mtp) {
  MIST_TRY(std::string flat, expand_layout(layout));
  std::vector<std::string> entries(1);
  for (char c : flat) {
    if (c == '|') {
      entries.emplace_back();
      continue;
    }
    if (c != 'E' && c != 'L' && c != 't' && c != 'm')
      return fail(kLayoutFlag, fmt::format("invalid layer character '{}' (known: E, t, L, m)", c));
    entries.back() += c;
  }
  const int64_t n = static_cast<int64_t>(entries.size());
  if (n % pp != 0)
    return fail(kLayoutFlag, fmt::format("has {} stages, not a multiple of the pipeline size {}", n, pp));
  std::string all;
  for (const auto& e : entries) all += e;
  if (all.empty() || all.front() != 'E' || std::count(all.begin(), all.end(), 'E') != 1)
    return fail(kLayoutFlag, "must start with the embedding 'E' and hold it once");
  if (all.back() != 'L' || std::count(all.begin(), all.end(), 'L') != 1)
    return fail(kLayoutFlag, "must end with the loss 'L' and hold it once");
  // Megatron's validate_layer_layout: as many 'm' as --mtp-num-layers, after every decoder layer;
  // mist runs them where Megatron does by default, with the loss (a rank of their own is refused).
  const int64_t ms = std::count(all.begin(), all.end(), 'm');
  if (ms != mtp)
    return fail(kLayoutFlag, fmt::format("holds {} multi-token-prediction layers ('m') but --mtp-num-layers is {}",
                                         ms, mtp));
  if (ms > 0 && entries.back().find('m') == std::string::npos)
    return fail(kLayoutFlag, "mist places the multi-token-prediction layers ('m') with the loss 'L', on the last "
                             "stage's last chunk; a stage of their own is not modelled");
  if (ms > 0 && entries.back().find_last_of('t') != std::string::npos &&
      entries.back().find_last_of('t') > entries.back().find('m'))
    return fail(kLayoutFlag, "a decoder layer 't' follows a multi-token-prediction layer 'm'");
  const int64_t blocks = std::count(all.begin(), all.end(), 't');
  if (blocks != num_layers)
    return fail(kLayoutFlag, fmt::format("holds {} decoder layers but the model has {}", blocks, num_layers));
  LayoutLayers out;
  out.virtual_stages = n / pp;
  for (int64_t b = 0; b < pp; ++b) {
    int64_t total = 0;
    out.chunks.emplace_back();
    for (int64_t a = 0; a < out.virtual_stages; ++a) {
      const auto& e = entries[static_cast<size_t>(a * pp + b)];
      const int64_t t = std::count(e.begin(), e.end(), 't');
      out.chunks.back().push_back(t);
      total += t;
    }
    if (total == 0) return fail(kLayoutFlag, fmt::format("stage {} holds no decoder layer", b));
    out.layers.push_back(total);
  }
  return out;
}

std::vector<int64_t> deepspeed_pipe_layers(int64_t num_layers, int64_t pp, bool mixed_precision) {
  // Weight 1 marks a ParallelTransformerLayerPipe; the rest are the cast, embedding, norm, head, cast.
  std::vector<int> w(2, 0);
  w.insert(w.end(), static_cast<size_t>(num_layers), 1);
  w.insert(w.end(), mixed_precision ? 3 : 2, 0);
  const size_t n = w.size(), m = static_cast<size_t>(pp);
  std::vector<size_t> parts(m + 1);
  if (n <= m) {
    for (size_t p = 0; p <= m; ++p) parts[p] = std::min(p, n);
  } else {
    // The linear-partition DP of partition_balanced: minimise max - min part weight; among equal
    // costs the later split point wins (its `>=`). Unreachable states carry an infinite cost.
    const double inf = std::numeric_limits<double>::infinity();
    const size_t cols = m + 1;
    std::vector<double> best_max((n + 1) * cols, inf), best_min((n + 1) * cols, inf), cost((n + 1) * cols, inf);
    std::vector<size_t> split((n + 1) * cols, 0);
    std::vector<double> prefix(n + 1, 0);
    for (size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + w[i];
    best_max[0] = 0;
    cost[0] = 0;
    for (size_t i = 1; i <= n; ++i)
      for (size_t j = 1; j <= std::min(i, m); ++j)
        for (size_t k = 0; k < i; ++k) {
          const double seg = prefix[i] - prefix[k];
          const double hi = std::max(best_max[k * cols + j - 1], seg);
          const double lo = std::min(best_min[k * cols + j - 1], seg);
          const double c = hi - lo;
          if (cost[i * cols + j] >= c) {
            cost[i * cols + j] = c;
            best_max[i * cols + j] = hi;
            best_min[i * cols + j] = lo;
            split[i * cols + j] = k;
          }
        }
    parts[m] = n;
    for (size_t j = m; j >= 1; --j) parts[j - 1] = split[parts[j] * cols + j];
  }
  std::vector<int64_t> layers;
  for (size_t s = 0; s < m; ++s) {
    int64_t blocks = 0;
    for (size_t i = parts[s]; i < parts[s + 1]; ++i) blocks += w[i];
    if (blocks == 0) return {};
    layers.push_back(blocks);
  }
  return layers;
}

std::vector<int64_t> torchtitan_stage_layers(int64_t num_layers, int64_t stages, int64_t first_less,
                                             int64_t last_less) {
  if (stages < 1) return {};
  if (stages == 1) return {num_layers};
  const int64_t effective = num_layers + first_less + last_less;
  if (stages > effective) return {};
  const int64_t base = effective / stages, extra = effective % stages;
  if (base == 0 || first_less > base || last_less > base) return {};
  std::vector<int64_t> out;
  int64_t placed = 0;
  for (int64_t s = 0; s < stages; ++s) {
    int64_t take = base + (s < extra ? 1 : 0);
    if (s == 0) take -= first_less;
    else if (s == stages - 1) take -= last_less;
    take = std::min(take, num_layers - placed);
    out.push_back(take);
    placed += take;
  }
  if (placed != num_layers) return {};
  return out;
}

int64_t torchtitan_num_stages(int64_t num_layers, int64_t pp, bool looped, const TorchtitanSplit& s) {
  if (s.layers_per_stage && *s.layers_per_stage > 0) {
    const int64_t e = num_layers + s.first_less + s.last_less;
    return (e + *s.layers_per_stage - 1) / *s.layers_per_stage;
  }
  return pp * (looped ? 2 : 1);
}

std::vector<int64_t> torchtitan_rank_layers(const std::vector<int64_t>& stage_layers, int64_t pp) {
  const int64_t n = static_cast<int64_t>(stage_layers.size());
  if (pp < 1 || n == 0 || n % pp != 0) return {};
  std::vector<int64_t> out;
  for (int64_t r = 0; r < pp; ++r) {
    int64_t total = 0;
    for (int64_t s = r; s < n; s += pp) {
      if (stage_layers[static_cast<size_t>(s)] != stage_layers[static_cast<size_t>(r)] ||
          stage_layers[static_cast<size_t>(s)] == 0)
        return {};
      total += stage_layers[static_cast<size_t>(s)];
    }
    out.push_back(total);
  }
  return out;
}

namespace {

// layers_per_stage giving exactly `stages` virtual stages, if any.
std::optional<int64_t> layers_per_stage_for(int64_t effective, int64_t stages) {
  for (int64_t lps = 1; lps <= effective; ++lps)
    if ((effective + lps - 1) / lps == stages) return lps;
  return std::nullopt;
}

// Every generated split with `v` chunks per rank, torchtitan's defaults (1, 1) first.
template <class F>
void for_each_torchtitan_split(int64_t num_layers, int64_t pp, int64_t v, F visit) {
  std::vector<std::pair<int64_t, int64_t>> weights{{1, 1}};
  for (int64_t sum = 0; sum <= 2 * num_layers; ++sum)
    for (int64_t a = std::max<int64_t>(0, sum - num_layers); a <= std::min(sum, num_layers); ++a)
      if (!(a == 1 && sum - a == 1)) weights.emplace_back(a, sum - a);
  for (auto [first, last] : weights) {
    TorchtitanSplit s{first, last, std::nullopt};
    if (v > 1) {
      s.layers_per_stage = layers_per_stage_for(num_layers + first + last, pp * v);
      if (!s.layers_per_stage) continue;
    }
    auto ranks = torchtitan_rank_layers(torchtitan_stage_layers(num_layers, pp * v, first, last), pp);
    if (!ranks.empty() && visit(s, ranks)) return;
  }
}

}  // namespace

std::optional<TorchtitanSplit> torchtitan_split(const std::vector<int64_t>& layers, int64_t v) {
  const int64_t pp = static_cast<int64_t>(layers.size());
  const int64_t num_layers = std::accumulate(layers.begin(), layers.end(), int64_t{0});
  std::optional<TorchtitanSplit> found;
  for_each_torchtitan_split(num_layers, pp, v, [&](const TorchtitanSplit& s, const std::vector<int64_t>& ranks) {
    if (ranks != layers) return false;
    found = s;
    return true;
  });
  return found;
}

std::optional<std::vector<int64_t>> torchtitan_nearest_layers(const std::vector<int64_t>& layers, int64_t v) {
  const int64_t pp = static_cast<int64_t>(layers.size());
  const int64_t num_layers = std::accumulate(layers.begin(), layers.end(), int64_t{0});
  std::optional<std::vector<int64_t>> best;
  int64_t best_distance = std::numeric_limits<int64_t>::max();
  for_each_torchtitan_split(num_layers, pp, v, [&](const TorchtitanSplit&, const std::vector<int64_t>& ranks) {
    int64_t d = 0;
    for (size_t i = 0; i < ranks.size(); ++i) d += std::abs(ranks[i] - layers[i]);
    if (d < best_distance) best_distance = d, best = ranks;
    return d == 0;
  });
  return best;
}

}  // namespace mist::engines
