// Small layers for the executor's tests: a one-block model of a family, and a run of one layer.
#pragma once

#include <string>
#include <utility>

#include "executor/executor.hpp"

namespace mist::executor::testing {

inline spec::ModelSpec model(const char* family, int64_t h, int64_t a, int64_t g) {
  spec::ModelSpec m;
  m.name = family;
  m.family = family;
  m.num_layers = 1;
  m.hidden_size = h;
  m.num_heads = a;
  m.num_kv_heads = g;
  m.ffn_hidden_size = 4 * h;
  m.vocab_size = 512;
  m.max_position_embeddings = 1024;
  if (std::string(family) == "gpt") m.qkv_bias = m.linear_bias = true;
  if (std::string(family) == "llama") {
    m.norm = spec::Norm::kRmsNorm;
    m.mlp = spec::Mlp::kSwiGlu;
    m.ffn_hidden_size = 8 * h / 3;
  }
  if (std::string(family) != "gpt") m.positions = spec::Positions::kRotary;
  if (std::string(family) == "falcon") m.parallel_block = true, m.norms_per_block = g == 1 ? 1 : 2;
  return m;
}

// A Llama-shaped mixture of experts (RMSNorm, rotary, SwiGLU experts, no biases): E experts of
// width fe, top k; with fs > 0 a shared expert of width fs, gated by sigmoid(x·w) when `gate`
// (Qwen2-MoE's; Mixtral's has none).
inline spec::ModelSpec moe(int64_t h, int64_t a, int64_t g, int64_t E, int64_t k, int64_t fe, int64_t fs = 0,
                           bool gate = false) {
  auto m = model("llama", h, a, g);
  m.name = "moe";
  m.ffn_hidden_size = 0;  // the experts' width is moe_ffn_hidden_size
  m.num_experts = E;
  m.experts_per_token = k;
  m.moe_ffn_hidden_size = fe;
  m.shared_expert_ffn_hidden_size = fs;
  m.shared_expert_gate = gate;
  return m;
}

// One layer of `m` (a block unless `kind` says otherwise; embeddings and heads untied), one thread.
inline BlockRun run(spec::ModelSpec m, int64_t s, int64_t b, spec::Dtype dt, CheckpointMode ck, bool flash,
                    bool dropout = false, graph::LayerKind kind = graph::LayerKind::kBlock) {
  BlockRun r;
  if (kind != graph::LayerKind::kBlock) m.tie_word_embeddings = false;
  r.model = std::move(m);
  r.layer = kind;
  r.seq_length = s;
  r.micro_batch = b;
  r.dtype = dt;
  r.checkpoint = ck;
  r.flash_attention = flash;
  r.dropout = dropout;
  r.threads = 1;
  return r;
}

}  // namespace mist::executor::testing
