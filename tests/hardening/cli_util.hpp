// Running `mist` in-process for the hardening tests, with inputs written to temporary files.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../cli/run_mist.hpp"

namespace mist::hardening {

using cli::testing::kExamples;
using cli::testing::mist;
using cli::testing::Outcome;

// Writes `text` to a fresh temporary file and returns its path.
inline std::string temp_file(const std::string& name, const std::string& text) {
  const auto dir = cli::testing::scratch_dir("hardening");
  const auto p = dir / name;
  std::ofstream(p) << text;
  return p.string();
}

inline std::vector<std::string> job_args(const std::string& cmd, const std::string& model, const std::string& cluster,
                                         const std::string& training) {
  return {cmd, "--model", model, "--cluster", cluster, "--training", training};
}

// A model small enough for an exhaustive tune in a test: GPT, 4 layers, h 256, 4 heads.
inline std::string small_model_file() {
  return temp_file("small_model.json", R"({"name": "small-gpt", "family": "gpt", "num_layers": 4, "hidden_size": 256,
      "num_heads": 4, "ffn_hidden_size": 1024, "vocab_size": 1024, "max_position_embeddings": 512,
      "norm": "layernorm", "mlp": "gelu", "positions": "learned"})");
}

}  // namespace mist::hardening
