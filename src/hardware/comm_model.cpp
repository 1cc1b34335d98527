#include "hardware/comm_model.hpp"

#include <algorithm>

namespace mist::hardware {

namespace {

// Bus bandwidth of a ring over this group: NVLink inside a node, else the GPU's PCIe. A ring that
// leaves the node crosses it through one NIC; NCCL runs one ring (channel) per NIC in use, and a
// group with r members on a node uses the r NICs of those GPUs (rail-local: one NIC per GPU on
// DGX A100/H100, NCCL's topology search picks each GPU's nearest NIC). The r rings each carry 1/r
// of the data, so the bus bandwidth is r × the per-GPU network share (on cloud nodes whose NIC is
// shared, the catalog's per-GPU figure already divides it), capped by the node's links. Off by
// default (CommConstants::rail_local_rings): docs/time-model.md says why.
// `ring_size` (0: not a ring: a point-to-point send or an all-to-all's) sets NVLink's efficiency.
double ring_bandwidth(const spec::ClusterSpec& c, bool crosses_nodes, int64_t per_node, const CommConstants& k,
                      int64_t ring_size = 0) {
  const double small = ring_size > 1 ? k.nvlink_small_group / static_cast<double>(ring_size) : 0.0;
  const double intra = c.gpu.link_bw > 0 ? c.intra_node_bw * (k.nvlink_efficiency - small)
                                         : c.intra_node_bw * k.pcie_efficiency;
  if (!crosses_nodes) return intra;
  const double rails = k.rail_local_rings ? static_cast<double>(std::max<int64_t>(1, per_node)) : 1.0;
  return std::min(intra, rails * c.inter_node_bw * k.network_efficiency);
}

double latency(const spec::ClusterSpec& c, bool crosses_nodes) {
  return crosses_nodes ? c.inter_node_latency : c.intra_node_latency;
}

// An all-to-all (NCCL: a send and a receive to every peer, all in flight at once): of the n equal
// shares a rank sends, m - 1 go to the peers on its node over NVLink and n - m leave it through its
// network share, both at once; the slower path sets the time, plus one latency of the farthest.
double all_to_all_time(const spec::ClusterSpec& c, Group g, double bytes, const CommConstants& k) {
  const double n = static_cast<double>(g.size);
  const double m = g.crosses_nodes ? static_cast<double>(std::max<int64_t>(1, g.per_node)) : n;
  const double intra = ring_bandwidth(c, false, 1, k);
  const double inter = ring_bandwidth(c, true, 1, k);
  const double t = std::max((m - 1) / n * bytes / intra, g.crosses_nodes ? (n - m) / n * bytes / inter : 0.0);
  return k.collective_base_s + t + latency(c, g.crosses_nodes);
}

}  // namespace

double collective_time(const spec::ClusterSpec& c, Collective op, Group g, double bytes,
                       const CommConstants& k) {
  if (g.size <= 1 || bytes <= 0) return 0;
  if (op == Collective::kAllToAll) return all_to_all_time(c, g, bytes, k);
  // Each step's send and receive run at once on the two directions of a link; the ring's slowest
  // hop (a node boundary, when the group leaves the node) paces every step.
  if (op == Collective::kRingExchange)
    return static_cast<double>(g.size - 1) * p2p_time(c, g.crosses_nodes, bytes, k);
  const double n = static_cast<double>(g.size);
  // A ring all-reduce is a reduce-scatter then an all-gather: each moves (n-1)/n of the data.
  const double steps = op == Collective::kAllReduce ? 2.0 : 1.0;
  const double bw = ring_bandwidth(c, g.crosses_nodes, g.per_node, k, g.size);
  return k.collective_base_s + steps * ((n - 1) / n * bytes / bw + (n - 1) * latency(c, g.crosses_nodes));
}

double p2p_time(const spec::ClusterSpec& c, bool crosses_nodes, double bytes, const CommConstants& k) {
  if (bytes <= 0) return 0;
  return bytes / ring_bandwidth(c, crosses_nodes, 1, k) + latency(c, crosses_nodes);
}

double host_link_share(const spec::ClusterSpec& c, const CommConstants& k) {
  const int64_t sharing = std::clamp<int64_t>(c.gpus_per_pcie_switch, 1, std::max<int64_t>(c.gpus_per_node, 1));
  return c.pcie_bw * k.pcie_efficiency / static_cast<double>(sharing);
}

double host_memory_share(const spec::ClusterSpec& c, const CommConstants& k) {
  if (c.host_memory_bw <= 0) return 0;
  return c.host_memory_bw * k.host_memory_efficiency / static_cast<double>(std::max<int64_t>(c.gpus_per_node, 1));
}

double host_copy_time(const spec::ClusterSpec& c, double h2d, double d2h, const CommConstants& k) {
  h2d = std::max(h2d, 0.0);
  d2h = std::max(d2h, 0.0);
  if (h2d + d2h <= 0) return 0;
  const double link = host_link_share(c, k), dram = host_memory_share(c, k);
  const double over_link = std::max(h2d, d2h) / link;
  return dram > 0 ? std::max(over_link, (h2d + d2h) / dram) : over_link;
}

Placement place_groups(const spec::ClusterSpec& c, int64_t tp, int64_t dp, int64_t pp, int64_t ep, int64_t etp,
                       int64_t cp, int64_t cp_a2a) {
  Placement p;
  // What a group's links are is decided by the NVLink domain (a DGX node, an NVL72 rack): inside
  // it NVLink, across domains the network.
  const int64_t per_node = c.nvlink_gpus();
  // A group of `size` ranks `stride` apart: it leaves the domain when it spans more ranks than a
  // domain has, and a domain then holds per_node / stride of its members (at least one).
  auto strided = [&](int64_t size, int64_t stride) {
    return Group{size, stride * size > per_node && size > 1,
                 std::clamp<int64_t>(per_node / std::max<int64_t>(1, stride), 1, size)};
  };
  p.tp = {tp, tp > per_node, std::min(tp, per_node)};
  // CP ranks are tp apart; the dp·cp gradient group too: a node holds per_node / tp of them (one
  // when TP fills the node).
  p.cp = strided(cp, tp);
  const int64_t a = std::clamp<int64_t>(cp_a2a, 1, std::max<int64_t>(1, cp));
  p.cp_a2a = strided(a, tp);
  p.cp_ring = strided(cp / a, tp * a);
  p.dp = strided(dp * cp, tp);
  // The expert grid over the same tp·cp·dp ranks: etp fastest, then ep, then expert data parallel.
  const int64_t edp = std::max<int64_t>(1, tp * cp * dp / std::max<int64_t>(1, ep * etp));
  p.etp = {etp, etp > per_node, std::min(etp, per_node)};
  p.ep = strided(ep, etp);
  p.edp = strided(edp, etp * ep);
  p.tp_ep = strided(etp * ep, 1);
  p.pp_crosses_nodes = pp > 1 && tp * cp * dp >= per_node && c.spans_domains();
  return p;
}

}  // namespace mist::hardware
