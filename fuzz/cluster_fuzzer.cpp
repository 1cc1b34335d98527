// Cluster input (GPU by catalog name with overrides, or a whole GPU object). What loads must have
// positive, finite capacities and bandwidths and survive cluster_to_json -> cluster_from_json.
#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mist;
  auto j = parse_json_text(fuzz::as_text(data, size), "cluster");
  if (!j) return 0;
  auto c = spec::cluster_from_json(*j, "cluster");
  fuzz::check_error(c, "cluster_from_json");
  if (!c) return 0;
  fuzz::check(c->nodes > 0 && c->gpus_per_node > 0 && c->num_gpus() > 0, "GPU count positive");
  for (double v : {c->gpu.memory_bytes, c->gpu.mem_bw, c->intra_node_bw, c->inter_node_bw, c->pcie_bw,
                   c->host_memory_bytes}) {
    fuzz::check_finite(v, "cluster quantity finite");
    fuzz::check(v > 0, "cluster capacity/bandwidth positive", std::to_string(v));
  }
  for (double v : {c->intra_node_latency, c->inter_node_latency}) {
    fuzz::check_finite(v, "latency finite");
    fuzz::check(v >= 0, "latency not negative", std::to_string(v));
  }
  auto back = spec::cluster_from_json(spec::cluster_to_json(*c), "cluster");
  fuzz::check(back.has_value(), "cluster round trip loads", back ? "" : back.error().to_string());
  fuzz::check(*back == *c, "cluster round trip is exact");
  return 0;
}
