#include "api/gpus.hpp"

#include <fmt/format.h>

#include "advisor/prices.hpp"
#include "api/inputs.hpp"

namespace mist::api {

namespace {

Json row_json(const advisor::Row& r) {
  Json j{{"gpu", r.gpu},
         {"num_gpus", r.num_gpus},
         {"nodes", r.nodes},
         {"gpus_per_node", r.gpus_per_node},
         {"feasible", r.feasible},
         {"pareto", r.pareto},
         {"plan", r.plan ? plan::plan_to_json(*r.plan) : Json(nullptr)}};
  if (r.feasible) {
    j["iteration_time_s"] = r.iteration_time_s;
    j["tokens_per_s"] = r.tokens_per_s;
    j["mfu"] = r.mfu;
    j["device_memory_bytes"] = r.peak_memory_bytes;  // everything on the GPU: the reserved peak, context, NCCL
    j["time_to_train_s"] = r.time_to_train_s;
  } else {
    j["reason"] = r.reason;
    j["shortfall_bytes"] = r.shortfall_bytes;
    j["host_shortfall_bytes"] = r.host_shortfall_bytes;
    j["tokens_per_s"] = 0;
    j["mfu"] = 0;
  }
  // Costs are null, not 0, where there is no price or no plan: 0 would read as free.
  const bool costed = r.feasible && r.price;
  j["cost_per_hour"] = costed ? Json(r.cost.usd_per_hour) : Json(nullptr);
  j["cost_per_million_tokens"] = costed ? Json(r.cost.usd_per_million_tokens) : Json(nullptr);
  j["total_cost"] = costed ? Json(r.cost.usd_total) : Json(nullptr);
  j["price"] = r.price ? Json{{"usd_per_gpu_hour", r.price->usd_per_gpu_hour},
                              {"date", r.price->date},
                              {"source", r.price->source},
                              {"instance", r.price->instance.empty() ? Json(nullptr) : Json(r.price->instance)},
                              {"gpus_per_instance", r.price->gpus_per_instance > 0 ? Json(r.price->gpus_per_instance)
                                                                                   : Json(nullptr)}}
                       : Json(nullptr);
  // Several nodes of a GPU without NVLink: what the network does (docs/gpus.md); null otherwise.
  j["pcie_only_network"] =
      r.pcie_only ? Json{{"pcie_GBps_per_gpu", r.pcie_only->pcie_bytes_per_s / 1e9},
                         {"inter_node_GBps_per_gpu", r.pcie_only->inter_node_bytes_per_s / 1e9},
                         {"exposed_tail_share", r.feasible ? Json(r.pcie_only->exposed_share) : Json(nullptr)}}
                  : Json(nullptr);
  return j;
}

}  // namespace

std::string GpusRequest::space_name() const { return engine.empty() || engine == "mist" ? space : engine; }

Outcome<advisor::AdvisorOptions> gpus_options(const GpusRequest& r) {
  advisor::AdvisorOptions o;
  Calibration calibration = r.calibration;
  if (!r.engine.empty() && r.engine != "mist") {
    if (r.space != "mist") return fail("--engine", "give --engine or --space, not both");
    auto e = engines::engine_from_string(r.engine);
    if (!e) return fail("--engine", e.error().message);
    o.engine = *e;
    o.space = tuner::engine_space(*e);
    calibration.engine = r.engine;
  } else {
    MIST_TRY(o.space, tuner::named_space(r.space));
  }
  MIST_TRY(o.prepare, prepare_options(calibration));
  if (r.fast) {
    // A coarser offload grid: 3^4 instead of 5^4 combinations per (ZeRO, checkpointing) pair.
    o.space.weight_offload = o.space.grad_offload = o.space.opt_offload = o.space.act_offload =
        std::vector<double>{0, 0.5, 1};
    if (r.space != "mist") return fail("--fast", "applies to the mist space only");
  }
  if (!r.profile_db.empty()) {
    auto calibration_data = job::read_calibration({.profile_db = r.profile_db, .time_constants = ""});
    if (!calibration_data) return fail("--profile-db", calibration_data.error().message);
    o.calibration = std::move(*calibration_data);
  }
  for (const auto& c : r.candidates)
    if (!c.empty()) o.gpus.push_back(c);
  o.counts = r.counts;
  o.tokens = r.tokens;
  if (r.gpus_per_node) {
    if (*r.gpus_per_node < 1 || *r.gpus_per_node > kMaxGpusPerNode)
      return fail("--gpus-per-node", fmt::format("must be 1..{}; got {}", kMaxGpusPerNode, *r.gpus_per_node));
    o.gpus_per_node = *r.gpus_per_node;
  }
  if (r.threads < 1 || r.threads > kMaxThreads)
    return fail("--threads", fmt::format("must be 1..{}; got {}", kMaxThreads, r.threads));
  o.threads = r.threads;
  o.progress = r.progress;
  const auto& defaults = advisor::default_prices();
  if (!defaults)
    return std::unexpected(Failure(Error{"", "the built-in price table is malformed: " + defaults.error().to_string()},
                                   Failure::Kind::kInternal));
  o.prices = *defaults;
  if (!r.prices.empty()) {
    auto user = advisor::load_prices(r.prices);
    if (!user) {
      name_the_option(user.error(), Input{r.prices, {}, "--prices"});
      return std::unexpected(user.error());
    }
    o.prices = advisor::merge_prices(o.prices, *user);
  }
  return o;
}

Outcome<advisor::Comparison> gpus(const spec::ModelSpec& model, const spec::TrainingSpec& training,
                                  const GpusRequest& r) {
  MIST_TRY(auto options, gpus_options(r));
  MIST_TRY(auto cmp, advisor::compare_gpus(model, training, options));
  return cmp;
}

Json gpus_json(const spec::ModelSpec& model, const GpusRequest& r, const advisor::Comparison& cmp) {
  Json rows = Json::array();
  for (const auto& row : cmp.rows) rows.push_back(row_json(row));
  Json smallest = Json::object();
  for (const auto& [g, n] : cmp.smallest_fitting) smallest[g] = n;
  return Json{{"model", model.name}, {"tokens", r.tokens}, {"space", r.space_name()},
              {"fast", r.fast},      {"rows", rows},       {"smallest_fitting", smallest}};
}

}  // namespace mist::api
