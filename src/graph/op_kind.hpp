// The kinds of op the lowering emits. Profile databases, CSV rows and reports store an op's kind
// as its string (to_string); rows read back are parsed with parse_op_kind.
#pragma once

#include <optional>
#include <string_view>

namespace mist::graph {

enum class OpKind {
  kView,            // a view of another tensor (q, k, v split from qkv): no kernel runs
  kLinear,          // a (column- or row-parallel) linear layer: a GEMM
  kBmm,             // a batched matmul of attention without flash attention (q·kᵀ, p·v)
  kLayerNorm,
  kRmsNorm,
  kSoftmax,
  kDropout,
  kGelu,
  kSwiGlu,
  kAdd,             // a residual add (or the position embedding's)
  kRotary,          // rotary position embedding of q and k
  kRepeat,          // GQA's expansion of k and v to all heads (without flash attention)
  kFlashAttention,  // the fused attention core
  kEmbedding,       // the vocab-parallel token lookup
  kCast,            // the logits cast to fp32 for the loss
  kCrossEntropy,    // the vocab-parallel loss
  kCopy,            // a layout copy (torchtitan's .contiguous() of the attention output)
};

// The kind as stored in profile rows and printed: "view", "linear", "flash_attention", ...
const char* to_string(OpKind k);
// The kind a stored string names; nullopt for a string that is no op kind of the lowering (a whole
// layer's row, "layer", or a row written by another tool).
std::optional<OpKind> parse_op_kind(std::string_view s);

}  // namespace mist::graph
