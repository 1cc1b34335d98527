#include "analysis/overheads.hpp"

namespace mist::analysis {

Communicators communicators_of(const plan::Plan& p, const spec::ClusterSpec& c) {
  Communicators k;
  k.tp_size = p.tp;
  k.dp_size = plan::grad_dp(p);  // gradients are reduced over dp·cp
  k.pp_size = p.pp;
  k.cp_size = p.cp;
  // Megatron's rank order puts TP innermost, then CP, then DP: the dp·cp group stays in an NVLink
  // domain while tp·cp·dp fits.
  k.dp_crosses_nodes = p.tp * p.cp * p.dp > c.nvlink_gpus();
  return k;
}

int nccl_channels(const spec::ClusterSpec& c, bool crosses_nodes) {
  if (crosses_nodes) return 8;          // rings over InfiniBand/RoCE: a few channels per NIC
  if (c.gpu.link_bw > 0) return 32;     // NVLink/NVSwitch: NCCL's maximum on Ampere/Hopper
  return 4;                             // PCIe only
}

bool uses_expert_groups(const plan::Plan& p, bool moe) { return moe && (p.ep > 1 || p.etp != p.tp); }

double nccl_buffer_bytes(const plan::Plan& p, const spec::ClusterSpec& c, bool expert_groups,
                         bool allgather_dispatcher) {
  const Communicators k = communicators_of(p, c);
  const bool tp_crosses = p.tp > c.nvlink_gpus();
  double bytes = 0;
  // Ring collectives talk to two peers per channel.
  if (k.tp_size > 1) bytes += 2.0 * nccl_channels(c, tp_crosses) * kNcclBytesPerPeerChannel;
  if (k.dp_size > 1) bytes += 2.0 * nccl_channels(c, k.dp_crosses_nodes) * kNcclBytesPerPeerChannel;
  // Pipeline send/recv: two neighbours, NCCL's default of 2 channels per p2p peer.
  if (k.pp_size > 1) bytes += 2.0 * 2.0 * kNcclBytesPerPeerChannel;
  // The CP ring's K/V send/recv: two neighbours, as the pipeline's.
  if (k.cp_size > 1) bytes += 2.0 * 2.0 * kNcclBytesPerPeerChannel;
  if (expert_groups) {
    // The expert grid (etp fastest, then ep, then expert data parallel): rings over the ETP and
    // EDP groups; the dispatcher's all-to-all sends to every other EP rank, 2 channels per peer
    // as for the pipeline's send/recv.
    // The all-gather dispatcher instead rings over the tp_ep group (etp·ep consecutive ranks).
    const int64_t per_node = c.nvlink_gpus(), edp = plan::expert_dp(p);
    if (allgather_dispatcher) {
      if (p.etp * p.ep > 1) bytes += 2.0 * nccl_channels(c, p.etp * p.ep > per_node) * kNcclBytesPerPeerChannel;
    } else {
      if (p.etp > 1) bytes += 2.0 * nccl_channels(c, p.etp > per_node) * kNcclBytesPerPeerChannel;
      if (p.ep > 1) bytes += static_cast<double>(p.ep - 1) * 2.0 * kNcclBytesPerPeerChannel;
    }
    if (edp > 1) bytes += 2.0 * nccl_channels(c, p.etp * p.ep * edp > per_node) * kNcclBytesPerPeerChannel;
  }
  return bytes;
}

}  // namespace mist::analysis
