#include "graph/op_kind.hpp"

#include <array>
#include <utility>

namespace mist::graph {

namespace {

// One table for both directions, so a kind's string is written once.
constexpr std::array<std::pair<OpKind, const char*>, 17> kNames = {{
    {OpKind::kView, "view"},
    {OpKind::kLinear, "linear"},
    {OpKind::kBmm, "bmm"},
    {OpKind::kLayerNorm, "layernorm"},
    {OpKind::kRmsNorm, "rmsnorm"},
    {OpKind::kSoftmax, "softmax"},
    {OpKind::kDropout, "dropout"},
    {OpKind::kGelu, "gelu"},
    {OpKind::kSwiGlu, "swiglu"},
    {OpKind::kAdd, "add"},
    {OpKind::kRotary, "rotary"},
    {OpKind::kRepeat, "repeat"},
    {OpKind::kFlashAttention, "flash_attention"},
    {OpKind::kEmbedding, "embedding"},
    {OpKind::kCast, "cast"},
    {OpKind::kCrossEntropy, "cross_entropy"},
    {OpKind::kCopy, "copy"},
}};

}  // namespace

const char* to_string(OpKind k) {
  for (const auto& [kind, name] : kNames)
    if (kind == k) return name;
  return "?";
}

std::optional<OpKind> parse_op_kind(std::string_view s) {
  for (const auto& [kind, name] : kNames)
    if (s == name) return kind;
  return std::nullopt;
}

}  // namespace mist::graph
