// Small helpers to build jobs in tests.
#pragma once

#include <string_view>

#include <gtest/gtest.h>

#include "analysis/memory_model.hpp"
#include "analysis/prediction.hpp"

namespace mist::testing {

inline spec::ClusterSpec cluster(const std::string& gpu, int64_t nodes, int64_t per_node) {
  auto j = Json{{"gpu", gpu}, {"nodes", nodes}, {"gpus_per_node", per_node}};
  return *spec::cluster_from_json(j, "cluster");
}

inline spec::TrainingSpec training(int64_t gbs, int64_t seq, spec::Dtype precision, bool flash,
                                   bool dropout, spec::Dtype grad = spec::Dtype::kFp32) {
  spec::TrainingSpec t;
  t.global_batch_size = gbs;
  t.seq_length = seq;
  t.precision = precision;
  t.grad_dtype = grad;
  t.flash_attention = flash;
  t.dropout = dropout;
  return t;
}

// A GPT model of the given shape (Megatron-style: LayerNorm, GELU, learned positions, biases).
inline spec::ModelSpec gpt(int64_t layers, int64_t hidden, int64_t heads, int64_t vocab = 51200,
                           int64_t max_positions = 2048) {
  spec::ModelSpec m;
  m.name = "test-gpt";
  m.family = "gpt";
  m.num_layers = layers;
  m.hidden_size = hidden;
  m.num_heads = heads;
  m.num_kv_heads = heads;
  m.ffn_hidden_size = 4 * hidden;
  m.vocab_size = vocab;
  m.max_position_embeddings = max_positions;
  m.qkv_bias = m.linear_bias = true;
  m.tie_word_embeddings = true;
  return m;
}

// The bytes of the memory term `name` of a stage (a test failure when there is none).
inline double memory_term(const analysis::StageMemory& s, std::string_view name) {
  for (const auto& t : s.terms)
    if (t.name == name) return t.bytes;
  ADD_FAILURE() << "no term " << name;
  return 0;
}

// The op of layer `L` named `name` (a test failure, and the first op, when there is none).
inline const graph::Op& op_named(const graph::Layer& L, std::string_view name) {
  for (const auto& op : L.ops)
    if (op.name == name) return op;
  ADD_FAILURE() << "no op " << name;
  return L.ops.front();
}

// The one entry point (analysis::predict) on a job prepared without calibration files.
inline Result<analysis::Prediction> predict(const spec::ModelSpec& m, const spec::ClusterSpec& c,
                                            const spec::TrainingSpec& t, const plan::Plan& p,
                                            const analysis::TimeConstants& k = {}) {
  MIST_TRY(auto job, analysis::PreparedJob::create(m, c, t, k));
  return analysis::predict(job, p);
}
inline Result<analysis::MemoryPrediction> memory_of(const spec::ModelSpec& m, const spec::ClusterSpec& c,
                                                    const spec::TrainingSpec& t, const plan::Plan& p) {
  MIST_TRY(auto pred, predict(m, c, t, p));
  return pred.memory;
}
inline Result<analysis::TimePrediction> time_of(const spec::ModelSpec& m, const spec::ClusterSpec& c,
                                                const spec::TrainingSpec& t, const plan::Plan& p,
                                                const analysis::TimeConstants& k = {}) {
  MIST_TRY(auto pred, predict(m, c, t, p, k));
  return pred.time;
}

}  // namespace mist::testing
