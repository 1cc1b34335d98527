#include "export/common.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace mist::engines {

std::string render_options(const std::vector<Option>& options) {
  std::string out;
  for (size_t i = 0; i < options.size(); ++i) {
    const auto& o = options[i];
    out += o.name;
    if (o.value && o.several) {
      out += " " + *o.value;  // names, each a plain word
    } else if (o.value) {
      // Quote what a shell would split or expand; layouts hold '|' and '*'.
      const bool plain = o.value->find_first_of(" \t\n'\"\\|*()$`;&<>") == std::string::npos && !o.value->empty();
      out += plain ? " " + *o.value : " '" + *o.value + "'";
    }
    out += i + 1 < options.size() ? " \\\n" : "\n";
  }
  return out;
}

std::string render_environment(const std::vector<EnvVar>& environment) {
  std::string out;
  for (const auto& e : environment) out += "export " + e.name + "=" + e.value + "\n";
  return out;
}

spec::TrainingSpec TrainingOverrides::applied_to(spec::TrainingSpec base) const {
  if (global_batch_size) base.global_batch_size = *global_batch_size;
  if (seq_length) base.seq_length = *seq_length;
  if (precision) base.precision = *precision;
  if (grad_dtype) {
    base.grad_dtype = *grad_dtype;
    base.grad_dtype_stated.value = true;
  }
  if (fp8) base.fp8 = *fp8;
  if (optimizer) base.optimizer = *optimizer;
  if (dropout) base.dropout = *dropout;
  if (compile) base.compile = *compile;
  if (compile_loss) base.compile_loss = *compile_loss;
  if (fp8_param_gather) base.fp8_param_gather = *fp8_param_gather;
  if (moe_capacity_factor) base.moe_capacity_factor = *moe_capacity_factor;
  if (moe_pad_to_capacity) base.moe_pad_to_capacity = *moe_pad_to_capacity;
  if (moe_dispatcher) base.moe_dispatcher = *moe_dispatcher;
  if (moe_router_fp32) base.moe_router_fp32 = *moe_router_fp32;
  if (mtp_layers) base.mtp_layers = *mtp_layers;
  if (recompute_modules) base.recompute_modules = *recompute_modules;
  if (cross_entropy_fusion) base.cross_entropy_fusion = *cross_entropy_fusion;
  if (!base.fp8_training()) base.fp8_param_gather = false;  // FP8 weights only in FP8 training
  return base;
}

}  // namespace mist::engines

namespace mist::engines::detail {

int64_t position_embeddings(const spec::ModelSpec& m, const spec::TrainingSpec& t) {
  if (m.positions == spec::Positions::kLearned) return m.max_position_embeddings;
  return std::max(m.max_position_embeddings, t.seq_length);
}

std::optional<std::string> position_embeddings_note(const spec::ModelSpec& m, const spec::TrainingSpec& t) {
  if (position_embeddings(m, t) == m.max_position_embeddings) return std::nullopt;
  return fmt::format("--max-position-embeddings {}: the sequence, above {}'s context of {} (the engine asserts "
                     "max_position_embeddings >= seq_length; rotary positions have no table, so only the "
                     "rotary cache grows)",
                     t.seq_length, m.name, m.max_position_embeddings);
}

EnvVar single_device_connection() { return {"CUDA_DEVICE_MAX_CONNECTIONS", "1"}; }

std::string single_device_connection_note(std::string_view rule) {
  return fmt::format("CUDA_DEVICE_MAX_CONNECTIONS=1: {} (one hardware queue: kernels reach the GPU in the "
                     "order they are issued, so tensor-parallel communication overlaps its GEMMs as scheduled)", rule);
}

std::string number_text(double v) { return fmt::format("{}", v); }

void add(std::vector<Option>& out, std::string name) { out.push_back({std::move(name), std::nullopt}); }
void add(std::vector<Option>& out, std::string name, int64_t value) {
  out.push_back({std::move(name), std::to_string(value)});
}
void add(std::vector<Option>& out, std::string name, const std::vector<std::string>& values) {
  out.push_back({std::move(name), join(values, " "), true});
}
void add(std::vector<Option>& out, std::string name, std::string value) {
  out.push_back({std::move(name), std::move(value)});
}

int64_t total_layers(const plan::Plan& p) {
  int64_t n = 0;
  for (const auto& s : p.stages) n += s.num_layers;
  return n;
}

std::vector<int64_t> stage_layers(const plan::Plan& p) {
  std::vector<int64_t> v;
  for (const auto& s : p.stages) v.push_back(s.num_layers);
  return v;
}

bool any_fully_recomputed(const plan::Plan& p) {
  return std::any_of(p.stages.begin(), p.stages.end(), [](const auto& s) { return s.ckpt_layers > 0; });
}

plan::Plan plan_with_stages(const std::vector<int64_t>& layers) {
  plan::Plan p;
  p.pp = static_cast<int64_t>(layers.size());
  for (int64_t n : layers) {
    plan::StagePlan s;
    s.num_layers = n;
    p.stages.push_back(s);
  }
  return p;
}

Result<int64_t> data_parallel(int64_t tp, int64_t pp, const spec::ClusterSpec& c, std::string_view tp_flag,
                              std::string_view pp_flag) {
  const int64_t gpus = c.num_gpus();
  if (gpus % (tp * pp) != 0)
    return fail(std::string(gpus % tp != 0 ? tp_flag : pp_flag), fmt::format("tensor × pipeline parallel size {}·{} = {} does not divide the "
                                               "cluster's {} GPUs", tp, pp, tp * pp, gpus));
  return gpus / (tp * pp);
}

Result<int64_t> product(int64_t a, int64_t b, std::string_view what) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return fail(std::string(what), fmt::format("{}·{} is too large", a, b));
  return r;
}

Result<int64_t> grad_accum(int64_t global_batch, int64_t micro_batch, int64_t dp, std::string_view flag) {
  MIST_TRY(int64_t per_step, product(micro_batch, dp, flag));
  if (global_batch % per_step != 0)
    return fail(std::string(flag), fmt::format("{} is not a multiple of micro batch × data parallel size = {}·{} "
                                               "= {}", global_batch, micro_batch, dp, micro_batch * dp));
  return global_batch / per_step;
}

Result<void> check_model_flag(const Flags& f, std::string_view flag, int64_t expected, const spec::ModelSpec& m,
                              std::string_view what) {
  MIST_TRY(auto v, f.integer(flag, 1, int64_t{1} << 40));
  if (v && *v != expected)
    return fail(std::string(flag), fmt::format("is {} but model {} has {} {}", *v, m.name, expected, what));
  return {};
}

Result<std::optional<spec::Dtype>> precision_switches(const Flags& f) {
  if (f.has("--bf16") && f.has("--fp16")) return fail("--fp16", "cannot be given together with --bf16");
  if (f.has("--bf16")) return std::optional{spec::Dtype::kBf16};
  if (f.has("--fp16")) return std::optional{spec::Dtype::kFp16};
  return std::optional{spec::Dtype::kFp32};
}

Result<bool> dropout_flags(const Flags& f) {
  MIST_TRY(auto hidden, f.number("--hidden-dropout", 0, 1));
  MIST_TRY(auto attention, f.number("--attention-dropout", 0, 1));
  return hidden.value_or(0.1) > 0 || attention.value_or(0.1) > 0;
}

std::optional<std::string> ignored_note(const Flags& f) {
  if (f.unknown().empty()) return std::nullopt;
  return fmt::format("ignored {} option(s) that do not change the plan: {}", f.unknown().size(), join(f.unknown()));
}

void add_training_flags(std::vector<Option>& o, const spec::TrainingSpec& t) {
  if (t.precision == spec::Dtype::kBf16) add(o, "--bf16");
  if (t.precision == spec::Dtype::kFp16) add(o, "--fp16");
  add(o, "--optimizer", std::string(t.optimizer == spec::Optimizer::kSgd ? "sgd" : "adam"));
  if (!t.dropout) {
    add(o, "--hidden-dropout", std::string("0"));
    add(o, "--attention-dropout", std::string("0"));
  }
}

}  // namespace mist::engines::detail
