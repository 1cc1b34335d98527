// Framework memory that no tensor accounts for: CUDA context, BLAS workspaces, NCCL buffers.
// Each is a documented estimate (docs/memory-model.md has the sources).
#pragma once

#include <cstdint>

#include "plan/plan.hpp"
#include "spec/cluster.hpp"

namespace mist::analysis {

// NCCL buffers per peer per channel with default settings: Simple 4 MiB (NCCL_BUFFSIZE),
// LL128 4.69 MiB and LL 0.5 MiB (the DEFAULT_*_BUFFSIZE constants of NCCL's source).
inline constexpr double kNcclBytesPerPeerChannel = 4194304.0 + 4915200.0 + 524288.0;

struct Communicators {
  int64_t tp_size = 1, dp_size = 1, pp_size = 1, cp_size = 1;  // dp_size: the dp·cp gradient group
  bool dp_crosses_nodes = false;  // DP groups leave the NVLink domain when tp·cp·dp > its GPUs
};

Communicators communicators_of(const plan::Plan& p, const spec::ClusterSpec& c);
// Channels NCCL opens for a communicator on this link (an estimate; see docs).
int nccl_channels(const spec::ClusterSpec& c, bool crosses_nodes);
// NCCL buffer bytes held by one GPU for all communicators it belongs to. `expert_groups`: the plan's
// experts use groups of their own (a mixture of experts with ep > 1 or etp ≠ tp, where Megatron
// reduces expert weights over the expert data-parallel group), whose communicators add theirs.
// `allgather_dispatcher`: the tokens travel over the tp_ep group's ring (Megatron's all-gather
// dispatcher) instead of the all-to-all over ep and the gathers over etp.
double nccl_buffer_bytes(const plan::Plan& p, const spec::ClusterSpec& c, bool expert_groups = false,
                         bool allgather_dispatcher = false);
// Whether plan `p` of a model with `moe` experts runs expert groups of its own (Megatron's
// use_expert_pgs: expert parallelism, or expert tensor parallelism other than tp).
bool uses_expert_groups(const plan::Plan& p, bool moe);

}  // namespace mist::analysis
