// Communication time: NCCL ring collectives with an alpha-beta model over the cluster's links,
// point-to-point transfers between pipeline stages, and host<->device copies over PCIe.
// Constants and their sources: docs/time-model.md.
#pragma once

#include <cstdint>

#include "spec/cluster.hpp"

namespace mist::hardware {

// kRingExchange: context parallelism's K/V ring, size − 1 steps in which every rank sends its block
// to the next rank and receives one from the previous (Transformer Engine's send/recv per step).
enum class Collective { kAllReduce, kAllGather, kReduceScatter, kAllToAll, kRingExchange };

struct CommConstants {
  // Bus bandwidth of an NVLink ring over n GPUs, as a fraction of the link bandwidth:
  // nvlink_efficiency − nvlink_small_group / n (a ring of 2 reaches less of the link than one of
  // 8). With collective_base_s and the cluster's per-step latency (intra_node_latency_us), fitted
  // to all-reduce times measured on an 8×A100-SXM4-80GB NVSwitch node for 2-8 GPUs and 1 MiB-1 GiB
  // (vTrain's nccl-tests tables, data/measured/nccl_allreduce_a100_vtrain.csv; docs/time-model.md,
  // "Communication"): 2.5% mean, 18% worst error, where a flat 0.78 and no base cost were 9.8% / 81%.
  double nvlink_efficiency = 0.79;
  double nvlink_small_group = 0.32;
  // NCCL's fixed cost of one collective call (launch, the protocol's handshakes): what remains of
  // a small all-reduce when its per-step latencies and bytes are taken off. Not applied to
  // point-to-point sends.
  double collective_base_s = 36e-6;
  double network_efficiency = 0.85;  // InfiniBand/RoCE ring bus bandwidth vs line rate
  double pcie_efficiency = 0.88;     // measured 55 of 63 GB/s on PCIe 5 x16 (ml-engineering)
  // Sustained fraction of the DRAM channels' peak that DMA copies from pinned host memory reach:
  // STREAM-class, three quarters (docs/time-model.md, "Host copies").
  double host_memory_efficiency = 0.75;
  // NCCL runs one ring per NIC in use: a group with r members on each node crosses nodes at r
  // times the per-GPU network share (Group::per_node). Physically right for rail-optimised
  // DGX-class nodes, but off by default: turning it on makes the Megatron-Core H100 pp = 1 rows
  // 20-50% optimistic (their too-slow gradient reduce-scatter was hiding a too-fast compute model
  // for small layers; docs/time-model.md, 2026-11-30). Until that is modelled, rings cross nodes
  // at one NIC's share.
  bool rail_local_rings = false;
};

// A group of `size` ranks; `crosses_nodes` when its members are in different NVLink domains (the
// node, or the cluster's nvlink_domain: an NVL72 rack), and then `per_node` of them share each
// domain (0: one per domain). NCCL builds a ring per NIC: a group with r
// members on a node drives r NICs (one per GPU on DGX-class nodes), so its inter-node bus
// bandwidth is r times the per-GPU network share, capped by NVLink (docs/time-model.md).
struct Group {
  int64_t size = 1;
  bool crosses_nodes = false;
  int64_t per_node = 0;
};

// Seconds for a collective whose full (unsharded) tensor has `bytes` bytes; for an all-to-all,
// `bytes` is what each rank sends (an equal share to every member, its own included); for a ring
// exchange, what each rank sends per step.
double collective_time(const spec::ClusterSpec& c, Collective op, Group g, double bytes,
                       const CommConstants& k = {});
// Seconds to send `bytes` to a neighbour (pipeline p2p).
double p2p_time(const spec::ClusterSpec& c, bool crosses_nodes, double bytes, const CommConstants& k = {});
// Seconds for one GPU's host copies, `h2d` bytes in and `d2h` bytes out at once, while every GPU
// of its node copies as it does (the tuner costs each stage alone, so a stage that offloads takes
// its node's other GPUs to offload alike): each direction over its share of the PCIe switch's x16
// uplink (the GPUs behind the switch divide it; PCIe is full duplex), both directions together
// within the GPU's share of the node's DRAM bandwidth.
double host_copy_time(const spec::ClusterSpec& c, double h2d, double d2h = 0, const CommConstants& k = {});
// The per-GPU rates behind it, bytes/s: one direction of the uplink share, and the DRAM share
// (0: not known, no bound).
double host_link_share(const spec::ClusterSpec& c, const CommConstants& k = {});
double host_memory_share(const spec::ClusterSpec& c, const CommConstants& k = {});

// Where Megatron's rank order (tp fastest, then cp, then dp, then pp) puts each group, and where
// its expert grid (etp fastest, then ep, then the expert data-parallel group, then pp: parallel
// folding) puts the expert groups on the same GPUs. `dp` is the group gradients are reduced over:
// the dp·cp ranks that hold the same weights (Megatron's data-parallel group with context
// parallelism), tp apart.
struct Placement {
  Group tp, cp, dp;
  Group etp, ep, edp;
  Group tp_ep;  // etp·ep consecutive ranks: Megatron's tp_ep group (the all-gather dispatcher's)
  // Hierarchical context parallelism (a2a+p2p, `cp_a2a` > 1): the all-to-all groups of cp_a2a
  // consecutive CP ranks, and the ring over cp / cp_a2a of them, cp_a2a CP ranks apart (Megatron's
  // hierarchical_context_parallel_sizes: the first size is the inner group).
  Group cp_a2a, cp_ring;
  bool pp_crosses_nodes = false;  // neighbouring pipeline stages are in different NVLink domains
};
Placement place_groups(const spec::ClusterSpec& c, int64_t tp, int64_t dp, int64_t pp, int64_t ep = 1,
                       int64_t etp = 1, int64_t cp = 1, int64_t cp_a2a = 1);

}  // namespace mist::hardware
