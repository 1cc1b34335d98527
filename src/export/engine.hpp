// The training engines mist exports to and imports from, and what each can execute, as data the
// tuner can query. Every option name used by the exporters was read from the engine's source at
// the commit named here (docs/engines.md lists them).
#pragma once

#include <array>
#include <span>
#include <string_view>

#include "core/result.hpp"
#include "plan/plan.hpp"
#include "spec/engine.hpp"

namespace mist::engines {

// The stack is an input (spec/engine.hpp); this folder says what each can run.
using spec::Engine;
using spec::all_engines;
using spec::display_name;
using spec::engine_from_string;
using spec::to_string;

// A repository and the commit whose source the option names were checked against.
struct SourceRef {
  std::string_view repo;
  std::string_view commit;
  std::string_view date;
};
inline constexpr SourceRef kMegatronSource{"NVIDIA/Megatron-LM", "d98e8a64ddf34856e74b24714e3bedb2f5a39553",
                                           "2026-08-22"};
inline constexpr SourceRef kDeepSpeedSource{"microsoft/DeepSpeed", "38327e07f6cd39b63418f60cedd1651b0be3e7c3",
                                            "2025-02-21"};
inline constexpr SourceRef kMegatronDeepSpeedSource{"microsoft/Megatron-DeepSpeed",
                                                    "f4157bea69f3df8c6cb66f2ebcda66ba03d1288e", "2024-12-24"};
inline constexpr SourceRef kTorchtitanSource{"pytorch/torchtitan", "b5bcd76c66d0acb1a08b176d9639425bc55e0b2a",
                                             "2026-08-21"};

// How an engine lays transformer blocks onto pipeline stages.
enum class SplitSupport {
  kAny,                // Megatron: first/last stage counts or --pipeline-model-parallel-layout
  kDeepSpeedBalanced,  // DeepSpeed PipelineModule 'type:transformer': one fixed split per (layers, pp)
  kTorchtitanAuto,     // torchtitan's generated split, steered by first/last "less layers" weights
};

// Which per-stage counts of fully recomputed blocks (ckpt_layers) an engine can run.
enum class RecomputeSupport {
  kFirstNPerChunk,         // Megatron block method: the first N blocks of every model chunk
  kAnyIfSingleStageElseAll,// Megatron-DeepSpeed: block method without pipeline, else all or none
  kAllOrNone,              // torchtitan full AC wraps every block
};

struct OffloadCaps {
  bool weights = false;                 // any weight offload at all
  bool weights_need_zero3 = false;
  bool optimizer = false;               // any optimizer-state offload at all
  bool optimizer_any_fraction = false;  // fractions other than 1 (else all or nothing)
  int optimizer_min_zero = 0;           // lowest ZeRO level optimizer offload works with
  int optimizer_fraction_min_zero = 0;  // lowest ZeRO level for a fraction below 1
  bool tied_whole = false;              // weights, gradients and optimizer states move together, all or none
  bool activations_by_block = false;    // whole blocks of activations, one stage, no recompute
};

// What an engine runs of context parallelism (plan.cp > 1).
struct CpCaps {
  std::array<bool, 4> comms;  // the K/V exchanges it implements, by plan::CpComm (ring, a2a, all_gather, a2a+p2p)
  plan::CpComm nearest;       // the one another exchange becomes (capability's nearest plan)
  bool with_tp;               // cp > 1 together with tp > 1
  bool with_pp;               // cp > 1 together with pp > 1
  bool grouped_kv;            // cp > 1 on a model with fewer key/value heads than heads
  bool runs(plan::CpComm c) const { return comms[static_cast<size_t>(c)]; }
};

// What an engine can execute of mist's plan space.
struct EngineCaps {
  Engine engine;
  std::array<bool, 4> zero_levels;  // ZeRO levels the engine implements
  std::array<bool, 4> zero_levels_with_pp;  // those usable with pp > 1
  bool per_stage_zero;              // a different ZeRO level per stage
  bool virtual_stages;              // interleaved schedule (virtual_pipeline_stages > 1)
  SplitSupport split;
  RecomputeSupport full_recompute;
  bool selective_recompute;         // plan.recompute = selective, as the engine defines it
  bool selective_with_full;         // selective on some blocks and full on others at once
  OffloadCaps offload;
  CpCaps cp;
};

const EngineCaps& engine_caps(Engine e);

}  // namespace mist::engines
