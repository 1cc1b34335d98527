// How each engine lays transformer blocks onto pipeline stages, written from the engines' sources
// (commits in export/engine.hpp), so that exported options reproduce a plan's split exactly.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.hpp"

namespace mist::engines {

// ---- Megatron-LM ----------------------------------------------------------------------------
// A split as Megatron's flags give it: nothing (even), first/last stage counts
// (--decoder-first/last-pipeline-num-layers) or a layout string (--pipeline-model-parallel-layout).
// Blocks of each model chunk, per pipeline stage: pp lists of v entries (one without interleaving).
using ChunkLayers = std::vector<std::vector<int64_t>>;

struct MegatronSplit {
  std::optional<int64_t> first, last;
  std::optional<std::string> layout;
  // TransformerConfig's account_for_embedding/loss_in_pipeline_split (with the chunk count flag).
  bool account_embedding = false, account_loss = false;
};

// The flags for `chunks`: nothing (even), first/last stage counts, the accounting flags when the
// only shorter chunks are the first stage's first (one block fewer: the embedding's place) and the
// last stage's last (the loss's), else a layout. A layout puts the `mtp` multi-token prediction
// layers ('m') with the loss, on the last stage's last chunk.
MegatronSplit megatron_split(const ChunkLayers& chunks, int64_t mtp = 0);
// The same for `layers` (blocks per pipeline stage) in `v` equal chunks per stage.
MegatronSplit megatron_split(const std::vector<int64_t>& layers, int64_t v, int64_t mtp = 0);

// The model chunks' blocks under TransformerConfig's account_for_embedding/loss_in_pipeline_split
// (transformer_block.py get_num_layers_to_build): the embedding (the loss) counts as a layer of the
// split, and the first (last) stage builds one block fewer, in its first (last) model chunk.
Result<ChunkLayers> megatron_layers_accounting(int64_t num_layers, int64_t pp, bool embedding, bool loss,
                                               int64_t virtual_stages);
// Blocks per stage of a chunk split.
std::vector<int64_t> stage_totals(const ChunkLayers& chunks);

// Blocks per stage from first/last counts (transformer_block.py: the middle stages share the rest
// evenly). The error names the flag at fault.
Result<std::vector<int64_t>> megatron_layers_from_first_last(int64_t num_layers, int64_t pp,
                                                             std::optional<int64_t> first,
                                                             std::optional<int64_t> last);

// Blocks per stage and the virtual stage count from a layout string such as "Et*3|(tt|)*29,m|L"
// (pipeline_parallel_layer_layout.py: '|' splits stages, x*n and (..)*n repeat, commas are
// cosmetic; entry a·pp + b is chunk a of stage b). mist needs the `mtp` multi-token prediction
// layers ('m', as many as --mtp-num-layers) beside the loss.
struct LayoutLayers {
  std::vector<int64_t> layers;  // per pipeline stage
  ChunkLayers chunks;           // per stage, per model chunk
  int64_t virtual_stages = 1;
};
Result<LayoutLayers> megatron_layers_from_layout(std::string_view layout, int64_t pp, int64_t num_layers,
                                                 int64_t mtp = 0);

// ---- DeepSpeed (Megatron-DeepSpeed GPTModelPipe) --------------------------------------------
// Blocks per stage of DeepSpeed's 'type:transformer' partition (runtime/utils.py
// partition_balanced over GPTModelPipe's layer specs: two leading non-block specs, the blocks,
// then final norm, head and, in fp16/bf16, the cast back to fp32). Empty when a stage gets none.
std::vector<int64_t> deepspeed_pipe_layers(int64_t num_layers, int64_t pp, bool mixed_precision);

// ---- torchtitan -----------------------------------------------------------------------------
// Options that steer torchtitan's generated split (pipeline_parallel.py).
struct TorchtitanSplit {
  int64_t first_less = 1;  // parallelism.pipeline_parallel_first_stage_less_layers
  int64_t last_less = 1;   // parallelism.pipeline_parallel_last_stage_less_layers
  std::optional<int64_t> layers_per_stage;  // parallelism.pipeline_parallel_layers_per_stage
};

// Blocks per virtual stage of the generated split with `stages` virtual stages; empty when
// torchtitan would refuse the weights.
std::vector<int64_t> torchtitan_stage_layers(int64_t num_layers, int64_t stages, int64_t first_less,
                                             int64_t last_less);
// Virtual stage count torchtitan derives: ceil((L + first + last) / layers_per_stage) when given,
// else pp for single-stage schedules and 2·pp for looped ones.
int64_t torchtitan_num_stages(int64_t num_layers, int64_t pp, bool looped, const TorchtitanSplit& s);
// Blocks per pipeline rank and chunk count; rank r runs virtual stages r, r + pp, ... ("loop"
// style). Empty when the chunks of a rank differ in size (mist's plan cannot hold that).
std::vector<int64_t> torchtitan_rank_layers(const std::vector<int64_t>& stage_layers, int64_t pp);

// The options reproducing `layers` with `v` chunks per rank, or nothing when the generated split
// cannot. Prefers torchtitan's defaults (1, 1).
std::optional<TorchtitanSplit> torchtitan_split(const std::vector<int64_t>& layers, int64_t v);
// The generated split closest to `layers` (least total difference) with `v` chunks per rank;
// nothing when no weights give `v` equal chunks per rank.
std::optional<std::vector<int64_t>> torchtitan_nearest_layers(const std::vector<int64_t>& layers, int64_t v);

}  // namespace mist::engines
