#include "analysis/prepared_job.hpp"

#include <map>
#include <mutex>
#include <tuple>

#include <fmt/format.h>

#include "graph/lower.hpp"
#include "spec/engine_fields.hpp"

namespace mist::analysis {

struct PreparedJob::Cache {
  std::mutex mu;
  // Keyed by (sequence parallel, recompute mode, expert parallel, expert tensor parallel, one local
  // expert); a built entry never moves (std::map nodes), so pointers to it stay valid.
  std::map<std::tuple<bool, size_t, bool, bool, bool, bool, int, int64_t>, Result<std::unique_ptr<Lowering>>>
      lowerings;
};

Result<PreparedJob> PreparedJob::create(spec::ModelSpec model, spec::ClusterSpec cluster, spec::TrainingSpec training,
                                        TimeConstants constants, Calibration calibration, spec::Engine engine) {
  MIST_CHECK(plan::validate_training(model, cluster, training));
  // Fields another engine runs, refused for the whole job: any plan the search tries may use them.
  if (const auto refused = spec::engine_training_refusals(training, engine); !refused.empty())
    return std::unexpected(refused.front());
  // Megatron-Core's MoE layer (graph/lower_moe.cpp) and its --qk-layernorm attention are the ones
  // lowered; torchtitan's and DeepSpeed's dispatch, keep and shard differently.
  if (std::string why = spec::megatron_core_only(model); !why.empty() && engine != spec::Engine::kMegatron)
    return fail("--engine", fmt::format("model {} {}, which mist models as Megatron-Core runs it; {}'s "
                                        "implementation is not modelled yet: use --engine megatron",
                                        model.name, why, spec::display_name(engine)));
  auto inputs =
      std::make_shared<const Inputs>(Inputs{std::move(model), std::move(cluster), std::move(training), engine});
  return PreparedJob(std::move(inputs), std::make_shared<Cache>(), std::move(constants), std::move(calibration));
}

PreparedJob PreparedJob::with_constants(TimeConstants constants) const {
  PreparedJob j(inputs_, cache_, std::move(constants), calibration_);
  j.headroom_ = headroom_;
  j.replay_allocator_ = replay_allocator_;
  return j;
}

PreparedJob PreparedJob::with_nodes(int64_t nodes) const {
  Inputs in = *inputs_;
  in.cluster.nodes = nodes;
  PreparedJob j(std::make_shared<const Inputs>(std::move(in)), std::make_shared<Cache>(), constants_, calibration_);
  j.headroom_ = headroom_;
  j.replay_allocator_ = replay_allocator_;
  return j;
}

PreparedJob PreparedJob::with_memory_headroom(double fraction) const {
  PreparedJob j = *this;
  j.headroom_ = fraction;
  return j;
}

PreparedJob PreparedJob::with_allocator_replay(bool on) const {
  PreparedJob j = *this;
  j.replay_allocator_ = on;
  return j;
}

Result<const Lowering*> PreparedJob::lowering(bool sequence_parallel, plan::Recompute recompute) const {
  return lowering_with(sequence_parallel, recompute, false, false, false, false, plan::CpComm::kRing);
}

Result<const Lowering*> PreparedJob::lowering(const plan::Plan& p) const {
  // A dense model has no dispatcher: every plan shares the lowering without expert collectives.
  const bool moe = model().is_moe();
  return lowering_with(p.sequence_parallel && p.tp > 1, p.recompute, moe && p.ep > 1, moe && p.etp > 1,
                       moe && p.ep == model().num_experts, p.cp > 1, p.cp_comm, p.cp_a2a);
}

namespace {
// The plan's K/V exchange as the engine implements it: torchtitan's ring is PyTorch's all-gather
// rotation (graph::CpExchange).
graph::CpExchange cp_exchange(plan::CpComm comm, spec::Engine engine) {
  switch (comm) {
    case plan::CpComm::kAllToAll: return graph::CpExchange::kAllToAll;
    case plan::CpComm::kAllGather: return graph::CpExchange::kAllGather;
    case plan::CpComm::kA2aP2p: return graph::CpExchange::kA2aP2p;
    case plan::CpComm::kRing: break;
  }
  return engine == spec::Engine::kTorchtitan ? graph::CpExchange::kGatherRing : graph::CpExchange::kRing;
}
}  // namespace

Result<const Lowering*> PreparedJob::lowering_with(bool sequence_parallel, plan::Recompute recompute,
                                                   bool expert_parallel, bool expert_tensor_parallel,
                                                   bool one_local_expert, bool context_parallel,
                                                   plan::CpComm cp_comm, int64_t cp_a2a) const {
  const size_t r = static_cast<size_t>(recompute);
  if (r >= 2) return fail("plan.recompute", "unknown recompute mode");
  std::lock_guard lock(cache_->mu);
  if (!context_parallel) cp_comm = plan::CpComm::kRing;
  if (cp_comm != plan::CpComm::kA2aP2p) cp_a2a = 1;  // the all-to-all groups' size shapes a2a+p2p's buffers only
  const auto key = std::make_tuple(sequence_parallel, r, expert_parallel, expert_tensor_parallel, one_local_expert,
                                   context_parallel, static_cast<int>(cp_comm), cp_a2a);
  auto it = cache_->lowerings.find(key);
  if (it == cache_->lowerings.end()) {
    const auto& t = training();
    auto o = graph::lowering_options(t, sequence_parallel, engine());
    o.recomputes_selectively = recompute == plan::Recompute::kSelective;
    o.expert_parallel = expert_parallel;
    o.expert_tensor_parallel = expert_tensor_parallel;
    o.one_local_expert = one_local_expert;
    o.context_parallel = context_parallel;
    o.cp_exchange = cp_exchange(cp_comm, engine());
    o.cp_a2a = static_cast<int>(cp_a2a);
    auto lm = graph::lower(model(), t.seq_length, o);
    auto memory = build_stage_memory_model(lm, t, recompute);
    Result<std::unique_ptr<Lowering>> slot =
        memory ? Result<std::unique_ptr<Lowering>>(std::make_unique<Lowering>(Lowering{std::move(lm), std::move(*memory)}))
               : std::unexpected(memory.error());
    it = cache_->lowerings.emplace(key, std::move(slot)).first;
  }
  if (!it->second) return std::unexpected(it->second.error());
  return it->second.value().get();
}

MatmulRate matmul_rate(const PreparedJob& job) {
  MatmulRate r;
  const auto& c = job.cluster();
  hardware::PerfConstants k;
  if (!job.calibration().constants_source.empty() && job.constants().perf.matmul_efficiency > 0) {
    k = job.constants().perf;
    r.source = job.calibration().constants_source;
    r.calibrated = true;
  } else {
    r.source = c.gpu.matmul_bf16_flops > 0 && job.training().precision != spec::Dtype::kFp32
                   ? "the catalog's measured MAMF"
                   : fmt::format("{} of the dense peak (no MAMF measured)", k.default_matmul_efficiency);
  }
  r.flops = hardware::achievable_matmul_flops(c.gpu, job.training().precision, k);
  return r;
}

}  // namespace mist::analysis
