#include "plan/plan.hpp"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

namespace mist::plan {

namespace {

constexpr int64_t kMaxDegree = 1 << 20;
constexpr int64_t kMaxTp = 1024;
constexpr int64_t kMaxCp = 1024;
constexpr int64_t kMaxBatch = 1'000'000'000;
constexpr int64_t kMaxStageLayers = 100000;

// The parse-time bounds again, for plans built in code (importers, the tuner, tests): validate_plan
// is the one gate before a plan reaches the models, so a stage without layers or a fraction of 2
// stops here with the field named, as it would in a plan file.
Result<void> check_ranges(const Plan& p) {
  auto in = [](const std::string& path, auto v, auto lo, auto hi) -> Result<void> {
    if (!(v >= lo && v <= hi)) return fail(path, fmt::format("must be within [{}, {}], got {}", lo, hi, v));
    return {};
  };
  MIST_CHECK(in("plan.dp", p.dp, int64_t{1}, kMaxDegree));
  MIST_CHECK(in("plan.tp", p.tp, int64_t{1}, kMaxTp));
  MIST_CHECK(in("plan.pp", p.pp, int64_t{1}, kMaxPp));
  MIST_CHECK(in("plan.ep", p.ep, int64_t{1}, kMaxDegree));
  MIST_CHECK(in("plan.etp", p.etp, int64_t{1}, kMaxTp));
  MIST_CHECK(in("plan.cp", p.cp, int64_t{1}, kMaxCp));
  MIST_CHECK(in("plan.micro_batch_size", p.micro_batch_size, int64_t{1}, kMaxBatch));
  MIST_CHECK(in("plan.grad_accum_steps", p.grad_accum_steps, int64_t{1}, kMaxBatch));
  MIST_CHECK(in("plan.virtual_pipeline_stages", p.virtual_pipeline_stages, int64_t{1}, kMaxVirtual));
  for (size_t i = 0; i < p.stages.size(); ++i) {
    const StagePlan& s = p.stages[i];
    const std::string at = fmt::format("plan.stages[{}]", i);
    if (s.num_layers < 1)
      return fail(at + ".num_layers", fmt::format("must be at least 1, got {} (more pipeline stages than layers?)",
                                                  s.num_layers));
    MIST_CHECK(in(at + ".num_layers", s.num_layers, int64_t{1}, kMaxStageLayers));
    MIST_CHECK(in(at + ".zero", s.zero, 0, 3));
    MIST_CHECK(in(at + ".ckpt_layers", s.ckpt_layers, int64_t{0}, s.num_layers));
    MIST_CHECK(in(at + ".offload.weights", s.offload.weights, 0.0, 1.0));
    MIST_CHECK(in(at + ".offload.gradients", s.offload.gradients, 0.0, 1.0));
    MIST_CHECK(in(at + ".offload.optimizer_states", s.offload.optimizer_states, 0.0, 1.0));
    MIST_CHECK(in(at + ".offload.activations", s.offload.activations, 0.0, 1.0));
  }
  return {};
}

Result<Offload> offload_from_json(const Json& j, const std::string& path) {
  MIST_TRY(auto f, JsonFields::of(j, path));
  MIST_CHECK(f.reject_unknown({"weights", "gradients", "optimizer_states", "activations"}));
  Offload o;
  MIST_TRY(o.weights, f.number_or("weights", 0, 0, 1));
  MIST_TRY(o.gradients, f.number_or("gradients", 0, 0, 1));
  MIST_TRY(o.optimizer_states, f.number_or("optimizer_states", 0, 0, 1));
  MIST_TRY(o.activations, f.number_or("activations", 0, 0, 1));
  return o;
}

Result<StagePlan> stage_from_json(const Json& j, const std::string& path) {
  MIST_TRY(auto f, JsonFields::of(j, path));
  MIST_CHECK(f.reject_unknown({"num_layers", "zero", "ckpt_layers", "offload", "chunk_layers"}));
  StagePlan s;
  MIST_TRY(s.num_layers, f.integer("num_layers", 1, kMaxStageLayers));
  MIST_TRY(int64_t zero, f.integer_or("zero", 0, 0, 3));
  s.zero = static_cast<int>(zero);
  MIST_TRY(s.ckpt_layers, f.integer_or("ckpt_layers", 0, 0, kMaxStageLayers));
  if (s.ckpt_layers > s.num_layers)
    return fail(f.field_path("ckpt_layers"),
                fmt::format("{} recomputed blocks but the stage has only {}", s.ckpt_layers, s.num_layers));
  if (f.has("offload")) {
    MIST_TRY(s.offload, offload_from_json(f.raw("offload"), f.field_path("offload")));
  }
  if (f.has("chunk_layers")) {
    const Json& list = f.raw("chunk_layers");
    const std::string at = f.field_path("chunk_layers");
    if (!list.is_array() || list.empty() || list.size() > static_cast<size_t>(kMaxVirtual))
      return fail(at, fmt::format("must be a list of 1 to {} block counts, one per model chunk", kMaxVirtual));
    for (size_t i = 0; i < list.size(); ++i) {
      if (!list[i].is_number_integer() || list[i].get<int64_t>() < 0 || list[i].get<int64_t>() > kMaxStageLayers)
        return fail(fmt::format("{}[{}]", at, i), fmt::format("must be a whole number from 0 to {}, got {}",
                                                              kMaxStageLayers, list[i].dump()));
      s.chunk_layers.push_back(list[i].get<int64_t>());
    }
  }
  return s;
}

}  // namespace

const char* to_string(Recompute r) { return r == Recompute::kSelective ? "selective" : "none"; }

const char* to_string(CpComm c) {
  return c == CpComm::kAllToAll ? "a2a" : c == CpComm::kAllGather ? "all_gather" : c == CpComm::kA2aP2p ? "a2a+p2p" : "ring";
}

Result<Plan> load_plan(const std::string& path) {
  return load_json_as(path, "plan", plan_from_json);
}

Result<Plan> plan_from_json(const Json& j, const std::string& what) {
  MIST_TRY(auto f, JsonFields::of(j, what));
  MIST_CHECK(f.reject_unknown({"dp", "tp", "pp", "cp", "cp_comm", "cp_a2a", "ep", "etp", "sequence_parallel", "micro_batch_size",
                                          "grad_accum_steps", "virtual_pipeline_stages", "recompute",
                                          "overlap_grad_reduce", "overlap_param_gather", "overlap_tp_comm",
                                          "grad_accumulation_fusion", "async_tp_backward", "overlap_moe_a2a", "stages",
                                          "comment"}));
  Plan p;
  MIST_TRY(p.dp, f.integer("dp", 1, kMaxDegree));
  MIST_TRY(p.tp, f.integer("tp", 1, kMaxTp));
  MIST_TRY(p.pp, f.integer("pp", 1, kMaxPp));
  MIST_TRY(p.cp, f.integer_or("cp", 1, 1, kMaxCp));
  MIST_TRY(std::string cc, f.choice_or("cp_comm", "ring", {"ring", "a2a", "all_gather", "a2a+p2p"}));
  p.cp_comm = cc == "a2a"          ? CpComm::kAllToAll
              : cc == "all_gather" ? CpComm::kAllGather
              : cc == "a2a+p2p"    ? CpComm::kA2aP2p
                                   : CpComm::kRing;
  if (p.cp_comm != CpComm::kRing && p.cp == 1)
    return fail(f.field_path("cp_comm"), fmt::format("is \"{}\" but cp is 1: it says how context parallelism "
                                                     "exchanges keys and values, and there is none", cc));
  MIST_TRY(p.cp_a2a, f.integer_or("cp_a2a", 1, 1, kMaxCp));
  if (p.cp_comm == CpComm::kA2aP2p && (p.cp_a2a < 2 || p.cp_a2a >= p.cp || p.cp % p.cp_a2a != 0))
    return fail(f.field_path("cp_a2a"),
                f.has("cp_a2a") ? fmt::format("is {}: the all-to-all groups of a2a+p2p must be more than 1 and fewer "
                                              "than cp = {} ranks, and divide cp", p.cp_a2a, p.cp)
                                : std::string("is missing: cp_comm \"a2a+p2p\" needs the all-to-all groups' size "
                                              "(Megatron's first --hierarchical-context-parallel-sizes)"));
  if (p.cp_comm != CpComm::kA2aP2p && f.has("cp_a2a"))
    return fail(f.field_path("cp_a2a"), "sizes the all-to-all groups of cp_comm \"a2a+p2p\" only");
  MIST_TRY(p.ep, f.integer_or("ep", 1, 1, kMaxDegree));
  MIST_TRY(p.etp, f.integer_or("etp", 1, 1, kMaxTp));
  MIST_TRY(p.sequence_parallel, f.boolean_or("sequence_parallel", false));
  MIST_TRY(p.micro_batch_size, f.integer("micro_batch_size", 1, kMaxBatch));
  MIST_TRY(p.grad_accum_steps, f.integer("grad_accum_steps", 1, kMaxBatch));
  MIST_TRY(p.virtual_pipeline_stages, f.integer_or("virtual_pipeline_stages", 1, 1, kMaxVirtual));
  MIST_TRY(std::string rc, f.choice_or("recompute", "none", {"none", "selective"}));
  p.recompute = rc == "selective" ? Recompute::kSelective : Recompute::kNone;
  MIST_TRY(p.overlap_grad_reduce, f.boolean_or("overlap_grad_reduce", true));
  MIST_TRY(p.overlap_param_gather, f.boolean_or("overlap_param_gather", true));
  MIST_TRY(p.overlap_tp_comm, f.boolean_or("overlap_tp_comm", false));
  p.overlap_tp_comm_stated.value = f.has("overlap_tp_comm");
  MIST_TRY(p.grad_accumulation_fusion, f.boolean_or("grad_accumulation_fusion", true));
  MIST_TRY(p.async_tp_backward, f.boolean_or("async_tp_backward", true));
  p.overlap_grad_reduce_stated.value = f.has("overlap_grad_reduce");
  p.overlap_param_gather_stated.value = f.has("overlap_param_gather");
  p.grad_accumulation_fusion_stated.value = f.has("grad_accumulation_fusion");
  p.async_tp_backward_stated.value = f.has("async_tp_backward");
  MIST_TRY(p.overlap_moe_a2a, f.boolean_or("overlap_moe_a2a", false));
  p.overlap_moe_a2a_stated.value = f.has("overlap_moe_a2a");
  if (!f.has("stages")) return fail(f.field_path("stages"), "is required but missing (one object per pipeline stage)");
  const Json& st = f.raw("stages");
  if (!st.is_array()) return fail(f.field_path("stages"), "must be an array with one object per pipeline stage");
  for (size_t i = 0; i < st.size(); ++i) {
    MIST_TRY(StagePlan s, stage_from_json(st[i], fmt::format("{}[{}]", f.field_path("stages"), i)));
    p.stages.push_back(s);
  }
  if (static_cast<int64_t>(p.stages.size()) != p.pp)
    return fail(f.field_path("stages"),
                fmt::format("has {} entries but pp is {}: give one object per pipeline stage", p.stages.size(), p.pp));
  return p;
}

Json plan_to_json(const Plan& p) {
  Json stages = Json::array();
  for (const auto& s : p.stages) {
    stages.push_back({{"num_layers", s.num_layers},
                      {"zero", s.zero},
                      {"ckpt_layers", s.ckpt_layers},
                      {"offload",
                       {{"weights", s.offload.weights},
                        {"gradients", s.offload.gradients},
                        {"optimizer_states", s.offload.optimizer_states},
                        {"activations", s.offload.activations}}}});
    if (!s.chunk_layers.empty()) stages.back()["chunk_layers"] = s.chunk_layers;
  }
  Json j{{"dp", p.dp},
         {"tp", p.tp},
         {"pp", p.pp},
         {"sequence_parallel", p.sequence_parallel},
         {"micro_batch_size", p.micro_batch_size},
         {"grad_accum_steps", p.grad_accum_steps},
         {"virtual_pipeline_stages", p.virtual_pipeline_stages},
         {"recompute", to_string(p.recompute)},
         {"overlap_grad_reduce", p.overlap_grad_reduce},
         {"overlap_param_gather", p.overlap_param_gather},
         {"overlap_tp_comm", p.overlap_tp_comm},
         {"grad_accumulation_fusion", p.grad_accumulation_fusion},
         {"async_tp_backward", p.async_tp_backward},
         {"stages", stages}};
  // Written only when set, so a plan without them has the same file as before.
  if (p.cp != 1) j["cp"] = p.cp;
  if (p.cp_comm != CpComm::kRing) j["cp_comm"] = to_string(p.cp_comm);
  if (p.cp_comm == CpComm::kA2aP2p) j["cp_a2a"] = p.cp_a2a;
  if (p.ep != 1 || p.etp != 1) {
    j["ep"] = p.ep;
    j["etp"] = p.etp;
  }
  if (p.overlap_moe_a2a) j["overlap_moe_a2a"] = true;
  return j;
}

Result<void> validate_training(const spec::ModelSpec& m, const spec::ClusterSpec& c, const spec::TrainingSpec& t) {
  if (m.positions == spec::Positions::kLearned && t.seq_length > m.max_position_embeddings)
    return fail("training.seq_length",
                fmt::format("{} tokens exceed the {} rows of {}'s learned position table "
                            "(max_position_embeddings); a longer sequence needs a larger table, that is another model",
                            t.seq_length, m.max_position_embeddings, m.name));
  if (m.is_mla() && !t.flash_attention)
    return fail("training.flash_attention",
                fmt::format("false, but {}'s latent attention is lowered only as the fused attention kernel "
                            "Megatron-Core runs it with", m.name));
  if (m.windowed_layers() > 0 && t.seq_length > m.sliding_window && !t.flash_attention)
    return fail("training.flash_attention",
                fmt::format("false, but {} tokens exceed {}'s sliding attention window of {}: the engines run the "
                            "window only inside their fused attention kernels", t.seq_length, m.name,
                            m.sliding_window));
  if (!m.is_moe() && t.moe_routing_stated())
    return fail(t.moe_capacity_factor > 0                          ? "training.moe_capacity_factor"
                : t.moe_dispatcher != spec::MoeDispatcher::kAllToAll ? "training.moe_token_dispatcher"
                : t.moe_router_fp32                                  ? "training.moe_router_dtype"
                                                                     : "training.moe_load_imbalance",
                fmt::format("describes how a mixture of experts routes its tokens; {} has no experts", m.name));
  if (const uint32_t moe = t.recompute_modules & (spec::kRecomputeMoe | spec::kRecomputeMoeAct |
                                                   spec::kRecomputeSharedExperts);
      moe && !m.is_moe())
    return fail("training.recompute_modules",
                fmt::format("names \"{}\", a module of a mixture of experts; {} has no experts",
                            spec::recompute_module_names(moe).front(), m.name));
  if ((t.recompute_modules & spec::kRecomputeSharedExperts) && m.is_moe() && m.shared_expert_ffn_hidden_size == 0)
    return fail("training.recompute_modules", fmt::format("names \"shared_experts\"; {} has no shared expert", m.name));
  if ((t.recompute_modules & spec::kRecomputeMlaUpProj) && !m.is_mla())
    return fail("training.recompute_modules",
                fmt::format("names \"mla_up_proj\", the up projections of multi-latent attention; {} has none "
                            "(Megatron-LM refuses it too)", m.name));
  if (t.mtp_layers > 0 && m.positions == spec::Positions::kLearned)
    return fail("training.mtp_layers",
                fmt::format("multi-token prediction runs with rotary or no position embeddings (Megatron-LM's "
                            "validate_args); {} learns absolute positions", m.name));
  const auto& g = c.gpu;
  if (t.precision == spec::Dtype::kBf16 && g.bf16_flops <= 0)
    return fail("training.precision",
                fmt::format("{} has no bf16 support (bf16 needs NVIDIA Ampere, sm_80, or later); use fp16", g.name));
  if (t.precision == spec::Dtype::kFp16 && g.fp16_flops <= 0)
    return fail("training.precision", fmt::format("{} has no fp16 support", g.name));
  if (t.fp8_training() && g.fp8_flops <= 0)
    return fail("training.precision",
                fmt::format("{} has no FP8 tensor cores (FP8 training needs NVIDIA Hopper or Ada, sm_89, or later); "
                            "use bf16", g.name));
  if (t.fp8 == spec::Fp8Recipe::kMxfp8 && g.vendor == "nvidia" && g.compute_capability < 10.0)
    return fail("training.fp8_recipe", fmt::format("mxfp8 scales 32-element blocks in the tensor cores of NVIDIA "
                                                   "Blackwell (sm_100) and later; {} is sm_{:.0f}",
                                                   g.name, 10 * g.compute_capability));
  return {};
}

Result<void> check_tp(const spec::ModelSpec& m, int64_t tp) {
  if (m.num_heads % tp != 0)
    return fail("plan.tp", fmt::format("tp = {} must divide the {} attention heads", tp, m.num_heads));
  if (m.num_kv_heads % tp != 0)
    return fail("plan.tp", fmt::format("tp = {} must divide the {} key/value heads (Megatron shards "
                                       "query groups, it does not replicate them)", tp, m.num_kv_heads));
  // Dense blocks and the shared expert shard their FFN width over tp (the routed experts shard
  // theirs over etp: check_experts).
  for (auto [what, f] : {std::pair{"ffn_hidden_size", m.ffn_hidden_size},
                         std::pair{"shared_expert_ffn_hidden_size", m.shared_expert_ffn_hidden_size}})
    if (f % tp != 0) return fail("plan.tp", fmt::format("tp = {} must divide {} {}", tp, what, f));
  return {};
}

Result<void> check_experts(const spec::ModelSpec& m, int64_t tp_cp, int64_t dp, int64_t ep, int64_t etp) {
  if (!m.is_moe()) {
    if (ep != 1) return fail("plan.ep", fmt::format("must be 1: {} has no experts to split", m.name));
    if (etp != 1) return fail("plan.etp", fmt::format("must be 1: {} has no experts to split", m.name));
    return {};
  }
  if (m.num_experts % ep != 0)
    return fail("plan.ep", fmt::format("ep = {} must divide the {} experts", ep, m.num_experts));
  if (m.moe_ffn_hidden_size % etp != 0)
    return fail("plan.etp", fmt::format("etp = {} must divide moe_ffn_hidden_size {}", etp, m.moe_ffn_hidden_size));
  // Megatron-Core, which runs every mixture of experts mist plans, asserts expert_tensor_parallel_size
  // == 1 with biased experts (add_bias_linear; TransformerConfig.__post_init__, d98e8a64
  // transformer_config.py:2612).
  if (m.linear_bias && etp != 1)
    return fail("plan.etp", fmt::format("must be 1: {}'s experts carry biases, which Megatron-Core splits over no "
                                        "expert tensor-parallel group", m.name));
  // Megatron's expert grid (etp × ep × expert data parallel) covers the same tp·cp·dp GPUs of a
  // stage as the attention's (parallel_state: the world size must be divisible by etp·ep·pp).
  if ((tp_cp * dp) % (ep * etp) != 0)
    return fail("plan.ep", fmt::format("ep·etp = {}·{} must divide the {} GPUs of a pipeline stage (tp·cp·dp)",
                                       ep, etp, tp_cp * dp));
  return {};
}

bool holds_dense_blocks(const spec::ModelSpec& m, int64_t first_stage_layers, int64_t virtual_stages) {
  if (!m.is_moe() || m.first_dense_layers == 0) return true;
  return first_stage_layers / std::max<int64_t>(1, virtual_stages) >= m.first_dense_layers;
}

int64_t dense_blocks(const spec::ModelSpec& m, int stage) {
  return m.is_moe() && stage == 0 ? m.first_dense_layers : 0;
}

std::vector<int64_t> stage_chunk_layers(const Plan& p, size_t stage) {
  const StagePlan& st = p.stages.at(stage);
  if (!st.chunk_layers.empty()) return st.chunk_layers;
  const int64_t v = std::max<int64_t>(1, p.virtual_pipeline_stages);
  std::vector<int64_t> out;
  for (int64_t c = 0; c < v; ++c) out.push_back(st.num_layers * (c + 1) / v - st.num_layers * c / v);
  return out;
}

bool uneven_chunks(const Plan& p) {
  for (const auto& st : p.stages)
    for (int64_t n : st.chunk_layers)
      if (n != st.chunk_layers.front()) return true;
  return false;
}

int64_t expert_dp(const Plan& p) { return std::max<int64_t>(1, p.tp * p.cp * p.dp / (p.ep * p.etp)); }

int64_t grad_dp(const Plan& p) { return p.dp * p.cp; }

Result<void> check_cp(const spec::ModelSpec& m, const spec::TrainingSpec& t, int64_t cp, CpComm comm, int64_t tp,
                      int64_t a2a) {
  if (cp == 1) return {};
  if (m.is_mla())
    return fail("plan.cp", fmt::format("cp = {} with {}'s latent attention is not modelled yet", cp, m.name));
  if (comm == CpComm::kAllToAll || comm == CpComm::kA2aP2p) {
    // Transformer Engine's a2a splits each TP rank's heads over the CP group (flash_attn_a2a_communicate);
    // a2a+p2p over each all-to-all group.
    const int64_t heads = m.num_heads / tp, groups = m.num_kv_heads / tp, n = comm == CpComm::kAllToAll ? cp : a2a;
    if (heads % n != 0 || groups % n != 0)
      return fail(comm == CpComm::kAllToAll ? "plan.cp_comm" : "plan.cp_a2a",
                  fmt::format("{} splits each TP rank's {} heads and {} key/value heads over {} = {} ranks: {} must "
                              "divide both", to_string(comm), heads, groups, comm == CpComm::kAllToAll ? "cp" : "cp_a2a",
                              n, comm == CpComm::kAllToAll ? "cp" : "cp_a2a"));
  }
  if (comm != CpComm::kAllToAll && m.windowed_layers() > 0 && t.seq_length > m.sliding_window) {
    return fail("plan.cp", fmt::format("cp = {} with {}'s sliding-window attention is modelled for cp_comm \"a2a\" "
                                       "only (mist's ring and all-gather are the causal ones of full attention)",
                                       cp, m.name));
  }
  if (!t.flash_attention)
    return fail("plan.cp", fmt::format("cp = {} needs flash attention (training.flash_attention): the engines run "
                                       "the K/V ring inside their fused attention kernels", cp));
  // Megatron splits each sequence into 2·cp chunks, rank r holding chunks r and 2·cp−1−r, so that
  // every rank has the same share of the causal mask (get_batch_on_this_cp_rank; Megatron-LM
  // d98e8a64 arguments.py:1336 asserts seq_length % (2·cp) == 0).
  if (t.seq_length % (2 * cp) != 0)
    return fail("plan.cp", fmt::format("cp = {} splits each sequence into 2·cp = {} load-balanced chunks: {} must "
                                       "divide seq_length {}", cp, 2 * cp, 2 * cp, t.seq_length));
  return {};
}

Result<void> validate_plan(const Plan& p, const spec::ModelSpec& m, const spec::ClusterSpec& c,
                           const spec::TrainingSpec& t) {
  MIST_CHECK(check_ranges(p));
  if (static_cast<int64_t>(p.stages.size()) != p.pp)
    return fail("plan.stages", fmt::format("has {} entries but pp is {}", p.stages.size(), p.pp));
  // Degrees are within check_ranges (dp 2^20, tp and cp 1024, pp 1e5), so dp·tp·pp·cp stays
  // below 2^60.
  const int64_t gpus = p.dp * p.tp * p.pp * p.cp;
  if (gpus != c.num_gpus()) {
    if (p.cp == 1)
      return fail("plan", fmt::format("dp·tp·pp = {}·{}·{} = {} but the cluster has {} GPUs ({} nodes × {})",
                                      p.dp, p.tp, p.pp, gpus, c.num_gpus(), c.nodes, c.gpus_per_node));
    return fail("plan", fmt::format("dp·tp·pp·cp = {}·{}·{}·{} = {} but the cluster has {} GPUs ({} nodes × {})",
                                    p.dp, p.tp, p.pp, p.cp, gpus, c.num_gpus(), c.nodes, c.gpus_per_node));
  }
  int64_t layers = 0;
  for (const auto& s : p.stages) layers += s.num_layers;
  if (layers != m.num_layers)
    return fail("plan.stages", fmt::format("layers add up to {} but the model has {}", layers, m.num_layers));
  // micro_batch_size and grad_accum_steps may each be up to 1e9: their product with dp can pass
  // 2^63, and a wrapped product must not match the global batch by accident.
  int64_t samples = 0;
  if (__builtin_mul_overflow(p.micro_batch_size, p.dp, &samples) ||
      __builtin_mul_overflow(samples, p.grad_accum_steps, &samples))
    return fail("plan", fmt::format("micro_batch_size·dp·grad_accum_steps = {}·{}·{} exceeds 2^63; "
                                    "training.global_batch_size is {}",
                                    p.micro_batch_size, p.dp, p.grad_accum_steps, t.global_batch_size));
  if (samples != t.global_batch_size)
    return fail("plan", fmt::format("micro_batch_size·dp·grad_accum_steps = {}·{}·{} = {} but "
                                    "training.global_batch_size is {}",
                                    p.micro_batch_size, p.dp, p.grad_accum_steps, samples, t.global_batch_size));
  MIST_CHECK(check_tp(m, p.tp));
  MIST_CHECK(check_experts(m, p.tp * p.cp, p.dp, p.ep, p.etp));
  MIST_CHECK(check_cp(m, t, p.cp, p.cp_comm, p.tp, p.cp_a2a));
  // Chunk sizes first: the dense blocks' rule below reads the first chunk.
  for (size_t i = 0; i < p.stages.size(); ++i) {
    const auto& ch = p.stages[i].chunk_layers;
    if (ch.empty()) continue;
    const std::string at = fmt::format("plan.stages[{}].chunk_layers", i);
    if (p.virtual_pipeline_stages < 2)
      return fail(at, "gives the blocks of each interleaved model chunk: it needs virtual_pipeline_stages of 2 or more");
    if (static_cast<int64_t>(ch.size()) != p.virtual_pipeline_stages)
      return fail(at, fmt::format("has {} entries but virtual_pipeline_stages is {}", ch.size(),
                                  p.virtual_pipeline_stages));
    const int64_t sum = std::accumulate(ch.begin(), ch.end(), int64_t{0});
    if (sum != p.stages[i].num_layers)
      return fail(at, fmt::format("adds up to {} blocks but the stage's num_layers is {}", sum, p.stages[i].num_layers));
  }
  const int64_t first_chunk = stage_chunk_layers(p, 0).front();
  if (!holds_dense_blocks(m, first_chunk, 1)) {
    const bool stated = !p.stages.front().chunk_layers.empty();
    return fail(stated ? "plan.stages[0].chunk_layers" : "plan.stages[0].num_layers",
                fmt::format("{} layers{} leave out some of {}'s {} dense blocks: mist plans them all in the first "
                            "stage's first model chunk", p.stages.front().num_layers,
                            p.virtual_pipeline_stages > 1
                                ? fmt::format(" in {} chunks ({} in the first)", p.virtual_pipeline_stages, first_chunk)
                                : std::string(),
                            m.name, m.first_dense_layers));
  }
  // Megatron-LM (validate_args) refuses MoE under tensor parallelism without sequence parallelism.
  if (m.is_moe() && p.tp > 1 && !p.sequence_parallel)
    return fail("plan.sequence_parallel", "a mixture of experts with tp > 1 needs sequence parallelism (as in Megatron)");
  if (p.sequence_parallel && p.tp > 1 && t.seq_length % (p.tp * p.cp) != 0)
    return fail("plan.sequence_parallel",
                p.cp == 1 ? fmt::format("sequence parallelism splits the sequence: tp = {} must divide seq_length {}",
                                        p.tp, t.seq_length)
                          : fmt::format("sequence parallelism splits each CP rank's {} tokens: tp = {} must divide them",
                                        t.seq_length / p.cp, p.tp));
  if (p.overlap_tp_comm && p.tp > 1 && !p.sequence_parallel)
    return fail("plan.overlap_tp_comm", "overlapping TP communication needs sequence_parallel (as in Megatron)");
  if (p.overlap_moe_a2a && (!m.is_moe() || p.ep < 2))
    return fail("plan.overlap_moe_a2a", m.is_moe() ? "overlaps the dispatcher's all-to-alls over the expert-parallel "
                                                     "group: it needs ep > 1"
                                                   : fmt::format("overlaps a mixture of experts' dispatcher; {} has no "
                                                                 "experts", m.name));
  if (p.overlap_moe_a2a && t.moe_dispatcher == spec::MoeDispatcher::kAllGather)
    return fail("plan.overlap_moe_a2a", "overlaps the all-to-all dispatcher's exchanges; the all-gather dispatcher "
                                        "(training.moe_token_dispatcher) has none to overlap (Megatron-LM refuses it)");
  if (p.virtual_pipeline_stages > 1) {
    if (p.pp < 2)
      return fail("plan.virtual_pipeline_stages", "an interleaved schedule needs pp >= 2");
    for (size_t i = 0; i < p.stages.size(); ++i)
      if (p.stages[i].chunk_layers.empty() && p.stages[i].num_layers % p.virtual_pipeline_stages != 0)
        return fail(fmt::format("plan.stages[{}].num_layers", i),
                    fmt::format("{} layers cannot be split into {} virtual stages",
                                p.stages[i].num_layers, p.virtual_pipeline_stages));
    if (p.grad_accum_steps % p.pp != 0)
      return fail("plan.grad_accum_steps",
                  fmt::format("the interleaved schedule needs the micro-batch count ({}) to be a multiple "
                              "of pp ({})", p.grad_accum_steps, p.pp));
  }
  MIST_CHECK(validate_training(m, c, t));
  return {};
}

Plan uniform_plan(const spec::ModelSpec& m, int64_t dp, int64_t tp, int64_t pp, int64_t micro_batch,
                  int64_t grad_accum, const StagePlan& every_stage) {
  Plan p;
  p.dp = dp;
  p.tp = tp;
  p.pp = pp;
  p.micro_batch_size = micro_batch;
  p.grad_accum_steps = grad_accum;
  for (int64_t i = 0; i < pp; ++i) {
    StagePlan s = every_stage;
    s.num_layers = even_split_layers(m.num_layers, pp, i);
    s.ckpt_layers = std::min(s.ckpt_layers, s.num_layers);
    p.stages.push_back(s);
  }
  return p;
}

int64_t even_split_layers(int64_t layers, int64_t pp, int64_t stage) {
  return layers / pp + (stage < layers % pp ? 1 : 0);
}

std::vector<int64_t> even_split(int64_t layers, int64_t pp) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < pp; ++i) out.push_back(even_split_layers(layers, pp, i));
  return out;
}

ShardFactors shard_factors(int zero, int64_t dp) {
  const double d = static_cast<double>(dp);
  return {zero >= 3 ? d : 1.0, zero >= 2 ? d : 1.0, zero >= 1 ? d : 1.0};
}

}  // namespace mist::plan
