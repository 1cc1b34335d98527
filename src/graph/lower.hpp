// Lowering of a ModelSpec into layers of ops (GPT, Llama/Mistral/Qwen2, Falcon), following
// Megatron-LM's implementation: which tensors each op keeps for backward decides activation memory.
#pragma once

#include "graph/layer.hpp"
#include "spec/engine.hpp"
#include "spec/model.hpp"
#include "spec/training.hpp"

namespace mist::graph {

LoweredModel lower(const spec::ModelSpec& model, int64_t seq_length, const LoweringOptions& opts);
// The options of `engine`'s implementation of the model (Megatron-LM and DeepSpeed lower alike).
LoweringOptions lowering_options(const spec::TrainingSpec& training, bool sequence_parallel,
                                 spec::Engine engine = spec::Engine::kMegatron);
// Marks the ops `policy` recomputes under selective recompute (lower() does it for every layer);
// `modules`: Megatron's recompute modules under kAttentionCore (spec::RecomputeModule bits).
void mark_selective_recompute(Layer& layer, SelectivePolicy policy, uint32_t modules = spec::kRecomputeCoreAttn);

}  // namespace mist::graph
