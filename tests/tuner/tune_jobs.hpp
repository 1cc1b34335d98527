// Small jobs for the tuner's tests: a GPT shaped like GPT-3 1.3B with fewer, narrower layers.
#pragma once

#include <string>

#include "spec/catalog.hpp"
#include "spec/cluster.hpp"
#include "spec/model.hpp"
#include "spec/training.hpp"
#include "tuner/space.hpp"
#include "tuner/tuner.hpp"
#include "../common/sanitized.hpp"

namespace mist::tuner::testing {

using mist::testing::kSanitized;

// The job prepared without calibration files, then the library's entry points.
inline Result<analysis::PreparedJob> prepare(const spec::ModelSpec& m, const spec::ClusterSpec& c,
                                             const spec::TrainingSpec& t) {
  return analysis::PreparedJob::create(m, c, t);
}
inline Result<TuneResult> tune(const spec::ModelSpec& m, const spec::ClusterSpec& c, const spec::TrainingSpec& t,
                               const TuneOptions& o) {
  MIST_TRY(auto job, prepare(m, c, t));
  return tuner::tune(job, o);
}
inline Result<analysis::Prediction> predict(const spec::ModelSpec& m, const spec::ClusterSpec& c,
                                            const spec::TrainingSpec& t, const plan::Plan& p) {
  MIST_TRY(auto job, prepare(m, c, t));
  return analysis::predict(job, p);
}

inline spec::ClusterSpec cluster(const std::string& gpu, int64_t nodes, int64_t per_node) {
  return *spec::cluster_from_json(Json{{"gpu", gpu}, {"nodes", nodes}, {"gpus_per_node", per_node}}, "cluster");
}

inline spec::ModelSpec small_gpt(int64_t layers, int64_t hidden) {
  auto m = *spec::catalog_model("gpt3-1.3b");
  m.name = "small";
  m.num_layers = layers;
  m.hidden_size = hidden;
  m.num_heads = hidden / 128;
  m.num_kv_heads = m.num_heads;
  m.ffn_hidden_size = 4 * hidden;
  m.max_position_embeddings = 4096;  // learned positions: a row for every position of the longest job here
  return m;
}

inline spec::TrainingSpec training(int64_t gbs, int64_t seq, spec::Dtype precision = spec::Dtype::kBf16) {
  spec::TrainingSpec t;
  t.global_batch_size = gbs;
  t.seq_length = seq;
  t.precision = precision;
  return t;
}

// A space small enough to search many jobs quickly, with every kind of knob.
inline SearchSpace small_space() {
  SearchSpace s;
  s.tp = {1, 2};
  s.micro_batch = {1, 2};
  s.max_pp = 4;
  s.zero = {0, 1, 2, 3};
  s.weight_offload = s.grad_offload = {0, 1};
  s.opt_offload = {0, 0.5, 1};
  s.act_offload = {0, 0.5};
  return s;
}

}  // namespace mist::tuner::testing
