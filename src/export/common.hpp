// Private to src/export: helpers the exporters and importers share.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "export/exchange.hpp"
#include "export/flags.hpp"

namespace mist::engines::detail {

// Shortest text that reads back to the same double ("0.5", "1").
std::string number_text(double v);

void add(std::vector<Option>& out, std::string name);
void add(std::vector<Option>& out, std::string name, int64_t value);
void add(std::vector<Option>& out, std::string name, std::string value);
// An option taking several arguments (argparse's nargs): "--recompute-modules layernorm moe_act".
void add(std::vector<Option>& out, std::string name, const std::vector<std::string>& values);
// Precision, optimizer and dropout flags, spelled the same by Megatron-LM and Megatron-DeepSpeed.
void add_training_flags(std::vector<Option>& out, const spec::TrainingSpec& t);

int64_t total_layers(const plan::Plan& p);
std::vector<int64_t> stage_layers(const plan::Plan& p);
// Whether any stage of `p` fully recomputes some of its blocks (Megatron's full recompute).
bool any_fully_recomputed(const plan::Plan& p);
// A plan with `layers` per stage and the same options on every stage.
plan::Plan plan_with_stages(const std::vector<int64_t>& layers);

// dp = GPUs / (tp·pp); the error names `tp_flag` when tp alone does not divide the cluster, else `pp_flag`.
Result<int64_t> data_parallel(int64_t tp, int64_t pp, const spec::ClusterSpec& c, std::string_view tp_flag,
                              std::string_view pp_flag);
// a·b, or an error naming `what` when it overflows (inputs come from users' configs).
Result<int64_t> product(int64_t a, int64_t b, std::string_view what);

// Micro-batches per iteration per data-parallel rank; the error names `flag`.
Result<int64_t> grad_accum(int64_t global_batch, int64_t micro_batch, int64_t dp, std::string_view flag);

// A model-shape flag, when given, must match the model (the plan's split depends on it).
Result<void> check_model_flag(const Flags& f, std::string_view flag, int64_t expected, const spec::ModelSpec& m,
                              std::string_view what);

// --max-position-embeddings for Megatron-LM and Megatron-DeepSpeed: both assert it is at least
// --seq-length. A learned table has its own size (validate_training keeps the sequence within it); a
// rotary model has no table and gets max(its context, the sequence).
int64_t position_embeddings(const spec::ModelSpec& m, const spec::TrainingSpec& t);
// The note that says so when the sequence raised it, else nothing.
std::optional<std::string> position_embeddings_note(const spec::ModelSpec& m, const spec::TrainingSpec& t);

// CUDA_DEVICE_MAX_CONNECTIONS=1 and why, for an engine that asserts it (`rule` says when).
EnvVar single_device_connection();
std::string single_device_connection_note(std::string_view rule);

// --bf16 / --fp16 (Megatron-LM and Megatron-DeepSpeed spell them the same).
Result<std::optional<spec::Dtype>> precision_switches(const Flags& f);
// --hidden-dropout / --attention-dropout (both default to 0.1 in both engines).
Result<bool> dropout_flags(const Flags& f);

// "ignored N flags that do not change the plan: --lr, --data-path, ..."
std::optional<std::string> ignored_note(const Flags& f);

}  // namespace mist::engines::detail
