#include "profile/fit_samples.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "graph/lower.hpp"
#include "hardware/op_cost.hpp"

namespace mist::profile {

sym::Bindings parse_shape(const std::string& key) {
  sym::Bindings at;
  std::stringstream ss(key);
  for (std::string part; std::getline(ss, part, ';');) {
    const auto eq = part.find('=');
    if (eq == std::string::npos) return {};
    try {
      at[part.substr(0, eq)] = std::stod(part.substr(eq + 1));
    } catch (...) {
      return {};
    }
  }
  for (const char* s : {"b", "s", "h", "a", "g", "f", "t"})
    if (!at.contains(s)) return {};
  // Whole dimensions of a plausible size (the lowering takes them as integers).
  for (const auto& [name, v] : at)
    if (!(v >= 1 && v <= 1e9) || v != std::floor(v)) return {};
  return at;
}

std::optional<graph::Op> find_op(const Measurement& row, const sym::Bindings& at, int act_bytes) {
  const auto kind = graph::parse_op_kind(row.kind);
  if (!kind) return std::nullopt;
  spec::ModelSpec m;
  m.name = "fit";
  m.family = "gpt";
  m.num_layers = 1;
  m.hidden_size = static_cast<int64_t>(at.at("h"));
  m.num_heads = static_cast<int64_t>(at.at("a"));
  m.num_kv_heads = static_cast<int64_t>(at.at("g"));
  m.ffn_hidden_size = static_cast<int64_t>(at.at("f"));
  m.vocab_size = at.contains("V") ? static_cast<int64_t>(at.at("V")) : 1000;
  m.max_position_embeddings = static_cast<int64_t>(at.at("s"));
  m.qkv_bias = m.linear_bias = true;
  m.norm = *kind == graph::OpKind::kRmsNorm ? spec::Norm::kRmsNorm : spec::Norm::kLayerNorm;
  for (auto mlp : {spec::Mlp::kGelu, spec::Mlp::kSwiGlu})
    for (auto pos : {spec::Positions::kLearned, spec::Positions::kRotary})
      for (bool flash : {false, true}) {
        m.mlp = mlp;
        m.positions = pos;
        graph::LoweringOptions o;
        o.flash_attention = flash;
        o.dropout = true;
        o.act_bytes = act_bytes;
        const auto lm = graph::lower(m, static_cast<int64_t>(at.at("s")), o);
        for (const graph::Layer* L : {&lm.block, &lm.embedding, &lm.head})
          for (const auto& op : L->ops)
            if (op.name == row.op && op.kind == *kind) return op;
      }
  return std::nullopt;
}

std::optional<hardware::FitSample> sample_of(const Measurement& row, const spec::GpuSpec& g, spec::Dtype d) {
  if (row.pass != "forward" && row.pass != "backward") return std::nullopt;
  const auto at = parse_shape(row.shape);
  if (at.empty()) return std::nullopt;
  const auto op = find_op(row, at, spec::dtype_bytes(d));
  if (!op) return std::nullopt;
  const auto pass = row.pass == "backward" ? hardware::Pass::kBackward : hardware::Pass::kForward;
  const auto kernels = hardware::op_kernels(*op, at, d, pass);
  hardware::FitSample s;
  s.label = row.op + " " + row.pass + " " + row.shape;
  s.group = row.shape;
  s.seconds = row.median_s;
  // Linearised at the default constants: they decide which GEMMs count as memory-bound.
  hardware::add_kernels(s, g, kernels);
  if (s.kernels == 0) return std::nullopt;
  return s;
}

ProfileSamples samples_of(const std::vector<Measurement>& rows, const std::string& device,
                          const std::string& dtype_name, const spec::GpuSpec& g, spec::Dtype d) {
  ProfileSamples out;
  for (const auto& r : rows) {
    if (r.device != device || r.dtype != dtype_name) continue;
    if (auto s = sample_of(r, g, d))
      out.samples.push_back(std::move(*s));
    else
      ++out.skipped;
  }
  return out;
}

std::optional<std::string> most_common_dtype(const std::vector<Measurement>& rows, const std::string& device) {
  std::map<std::string, int> dtypes;
  for (const auto& r : rows)
    if (r.device == device) dtypes[r.dtype] += 1;
  if (dtypes.empty()) return std::nullopt;
  return std::max_element(dtypes.begin(), dtypes.end(), [](auto& x, auto& y) { return x.second < y.second; })->first;
}

HeldOutSplit hold_out(const std::vector<hardware::FitSample>& samples, int every) {
  HeldOutSplit r;
  std::set<std::string> groups;
  for (const auto& s : samples) groups.insert(s.group);
  if (every > 1) {
    int i = 0;
    for (const auto& g : groups)
      if (++i % every == 0) r.held.insert(g);
  }
  for (const auto& s : samples) (r.held.contains(s.group) ? r.test : r.train).push_back(s);
  return r;
}

}  // namespace mist::profile
