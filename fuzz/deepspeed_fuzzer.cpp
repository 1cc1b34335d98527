// DeepSpeed JSON importer. The input is the config, optionally followed by a line "%%" and the
// Megatron-DeepSpeed flags launched with it.
#include "export/deepspeed.hpp"
#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mist;
  const auto text = fuzz::as_text(data, size);
  const auto sep = text.find("\n%%\n");
  const auto config_text = text.substr(0, sep);
  const auto flags = sep == std::string_view::npos ? std::string_view{} : text.substr(sep + 4);
  auto j = parse_json_text(config_text, "deepspeed");
  if (!j) return 0;
  const auto& job = fuzz::fixed_job();
  auto r = engines::import_deepspeed(*j, flags, job.model, job.cluster);
  fuzz::check_error(r, "import_deepspeed");
  if (!r) return 0;
  const auto t = r->training.applied_to(job.training);
  auto valid = plan::validate_plan(r->plan, job.model, job.cluster, t);
  fuzz::check_error(valid, "validate_plan of an imported plan");
  return 0;
}
