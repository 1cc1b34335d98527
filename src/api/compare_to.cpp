#include "api/compare_to.hpp"

#include <fmt/format.h>

#include "export/deepspeed.hpp"
#include "export/megatron.hpp"

namespace mist::api {

namespace {

std::vector<JobDifference> differences(const engines::TrainingOverrides& o, const spec::TrainingSpec& file) {
  std::vector<JobDifference> out;
  auto differ = [&](const char* field, const auto& flags, const auto& ours) {
    if (flags != ours) out.push_back({field, fmt::format("{}", flags), fmt::format("{}", ours)});
  };
  if (o.global_batch_size) differ("global_batch_size", *o.global_batch_size, file.global_batch_size);
  if (o.seq_length) differ("seq_length", *o.seq_length, file.seq_length);
  spec::TrainingSpec stated = file;
  if (o.precision) stated.precision = *o.precision;
  if (o.fp8) stated.fp8 = *o.fp8;
  differ("precision", spec::precision_name(stated), spec::precision_name(file));
  if (o.optimizer) differ("optimizer", std::string(spec::to_string(*o.optimizer)), std::string(spec::to_string(file.optimizer)));
  if (o.dropout) differ("dropout", *o.dropout, file.dropout);
  if (o.compile) differ("compile", *o.compile, file.compile);
  if (o.compile_loss) differ("compile_loss", *o.compile_loss, file.compiled_loss());
  if (o.fp8_param_gather) differ("fp8_param_gather", *o.fp8_param_gather, file.fp8_param_gather);
  if (o.moe_capacity_factor) differ("moe_capacity_factor", *o.moe_capacity_factor, file.moe_capacity_factor);
  if (o.moe_pad_to_capacity) differ("moe_pad_to_capacity", *o.moe_pad_to_capacity, file.moe_pad_to_capacity);
  if (o.mtp_layers) differ("mtp_layers", *o.mtp_layers, file.mtp_layers);
  if (o.recompute_modules)
    differ("recompute_modules", join(spec::recompute_module_names(*o.recompute_modules), " "),
           join(spec::recompute_module_names(file.recompute_modules), " "));
  if (o.cross_entropy_fusion)
    differ("cross_entropy_fusion", std::string(spec::to_string(*o.cross_entropy_fusion)),
           std::string(spec::to_string(file.cross_entropy_fusion)));
  if (o.moe_dispatcher)
    differ("moe_token_dispatcher", std::string(spec::to_string(*o.moe_dispatcher)),
           std::string(spec::to_string(file.moe_dispatcher)));
  return out;
}

}  // namespace

Result<CurrentImport> import_current(const std::string& compare_to, const std::string& megatron_flags,
                                     bool job_from_flags, const job::Job& job, const std::string& option) {
  CurrentImport c;
  if (compare_to.ends_with(".json")) {
    MIST_TRY(c.imported, engines::import_deepspeed_file(compare_to, megatron_flags, job.model, job.cluster));
  } else {
    if (!megatron_flags.empty())
      return fail("--compare-megatron-flags", "goes with a DeepSpeed JSON file in --compare-to");
    MIST_TRY(c.imported, engines::import_megatron_flags(compare_to, job.model, job.cluster));
  }
  c.differences = differences(c.imported.training, job.training);
  c.job_from_flags = job_from_flags;
  c.training = job_from_flags ? c.imported.training.applied_to(job.training) : job.training;
  auto& p = c.imported.plan;
  const int64_t per_step = p.micro_batch_size * p.dp;
  if (per_step * p.grad_accum_steps != c.training.global_batch_size) {
    if (c.training.global_batch_size % per_step != 0)
      return fail(option,
                  fmt::format("its micro-batch × data-parallel size {}·{} = {} does not divide the training file's "
                              "global batch {}; give --job-from-flags for the flags' job (global batch {})",
                              p.micro_batch_size, p.dp, per_step, c.training.global_batch_size,
                              per_step * p.grad_accum_steps));
    const int64_t g = c.training.global_batch_size / per_step;
    c.imported.notes.push_back(fmt::format("gradient accumulation {} -> {}, for the training file's global batch {}",
                                           p.grad_accum_steps, g, c.training.global_batch_size));
    p.grad_accum_steps = g;
  }
  MIST_CHECK(plan::validate_plan(p, job.model, job.cluster, c.training));
  return c;
}

Json differences_json(const std::vector<JobDifference>& differences) {
  Json out = Json::array();
  for (const auto& d : differences) out.push_back({{"field", d.field}, {"flags", d.flags}, {"training_file", d.training_file}});
  return out;
}

}  // namespace mist::api
