// The models torchtitan defines (pytorch/torchtitan @ kTorchtitanSource.commit): a run names one
// with --module (a model folder) and --config (a function of its config_registry.py). mist finds
// the one whose shape is the job's model, or says what the user has to add.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "spec/model.hpp"

namespace mist::engines {

// One config_registry function and the shape its model_registry flavor builds.
struct TorchtitanModel {
  std::string_view module;  // --module
  std::string_view config;  // --config
  std::string_view flavor;  // the key of llama3_configs
  int64_t num_layers, hidden_size, num_heads, num_kv_heads, ffn_hidden_size, vocab_size;
  bool tie_word_embeddings;
  bool operator==(const TorchtitanModel&) const = default;
};

// The registered config whose model has `m`'s shape, if any.
std::optional<TorchtitanModel> torchtitan_model(const spec::ModelSpec& m);
// The registered config named `config` (any module), if torchtitan has it.
std::optional<TorchtitanModel> torchtitan_config(std::string_view config);

// For a model torchtitan does not register: what the user adds, and the --config name the export
// gives it (nullopt when no torchtitan model has the architecture, e.g. LayerNorm, GELU, biases).
struct TorchtitanMissingModel {
  std::optional<std::string> config;
  std::string note;
};
TorchtitanMissingModel torchtitan_missing_model(const spec::ModelSpec& m);

}  // namespace mist::engines
