// Lowering of a ModelSpec into layers of ops (GPT, Llama/Mistral/Qwen2, Falcon), following
// Megatron-LM's implementation: which tensors each op keeps for backward decides activation memory.
#pragma once

#include "graph/layer.hpp"
#include "spec/model.hpp"
#include "spec/training.hpp"

namespace mist::graph {

LoweredModel lower(const spec::ModelSpec& model, int64_t seq_length, const LoweringOptions& opts);
LoweringOptions lowering_options(const spec::TrainingSpec& training, bool sequence_parallel);

}  // namespace mist::graph
