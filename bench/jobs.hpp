// Jobs shared by the benchmarks: catalog models on catalog GPUs.
#pragma once

#include <string>

#include "spec/cluster.hpp"
#include "spec/model.hpp"
#include "spec/training.hpp"

namespace mist::bench {

inline spec::ClusterSpec cluster(const std::string& gpu, int64_t nodes, int64_t per_node) {
  return *spec::cluster_from_json(Json{{"gpu", gpu}, {"nodes", nodes}, {"gpus_per_node", per_node}}, "cluster");
}

inline spec::TrainingSpec training(int64_t gbs, int64_t seq, spec::Dtype precision, bool flash = true) {
  spec::TrainingSpec t;
  t.global_batch_size = gbs;
  t.seq_length = seq;
  t.precision = precision;
  t.flash_attention = flash;
  return t;
}

// A catalog model with its layer count changed (the layer sweeps).
inline spec::ModelSpec model(const std::string& name, int64_t layers = 0) {
  auto m = *spec::catalog_model(name);
  if (layers > 0) {
    m.name += "-L" + std::to_string(layers);
    m.num_layers = layers;
  }
  return m;
}

}  // namespace mist::bench
