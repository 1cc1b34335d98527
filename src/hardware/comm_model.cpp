#include "hardware/comm_model.hpp"

namespace mist::hardware {

namespace {

// Bus bandwidth of a ring over this group: NVLink inside a node, else the GPU's PCIe; a ring
// that leaves the node runs at the per-GPU network share (each GPU has its own NIC on DGX-class
// nodes; on cloud nodes the NIC is shared, which the catalog's per-GPU figure already divides).
double ring_bandwidth(const spec::ClusterSpec& c, bool crosses_nodes, const CommConstants& k) {
  const double intra = c.gpu.link_bw > 0 ? c.intra_node_bw * k.nvlink_efficiency
                                         : c.intra_node_bw * k.pcie_efficiency;
  if (!crosses_nodes) return intra;
  return std::min(intra, c.inter_node_bw * k.network_efficiency);
}

double latency(const spec::ClusterSpec& c, bool crosses_nodes) {
  return crosses_nodes ? c.inter_node_latency : c.intra_node_latency;
}

}  // namespace

double collective_time(const spec::ClusterSpec& c, Collective op, Group g, double bytes,
                       const CommConstants& k) {
  if (g.size <= 1 || bytes <= 0) return 0;
  const double n = static_cast<double>(g.size);
  // A ring all-reduce is a reduce-scatter then an all-gather: each moves (n-1)/n of the data.
  const double steps = op == Collective::kAllReduce ? 2.0 : 1.0;
  const double bw = ring_bandwidth(c, g.crosses_nodes, k);
  return steps * ((n - 1) / n * bytes / bw + (n - 1) * latency(c, g.crosses_nodes));
}

double p2p_time(const spec::ClusterSpec& c, bool crosses_nodes, double bytes, const CommConstants& k) {
  if (bytes <= 0) return 0;
  return bytes / ring_bandwidth(c, crosses_nodes, k) + latency(c, crosses_nodes);
}

double host_copy_time(const spec::ClusterSpec& c, double bytes, const CommConstants& k) {
  if (bytes <= 0) return 0;
  return bytes / (c.pcie_bw * k.pcie_efficiency);
}

Placement place_groups(const spec::ClusterSpec& c, int64_t tp, int64_t dp, int64_t pp) {
  Placement p;
  const int64_t per_node = c.gpus_per_node;
  p.tp = {tp, tp > per_node};
  p.dp = {dp, tp * dp > per_node && dp > 1};
  p.pp_crosses_nodes = pp > 1 && tp * dp >= per_node && c.nodes > 1;
  return p;
}

}  // namespace mist::hardware
