// Training input: what loads has positive sizes and survives training_to_json -> training_from_json.
#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mist;
  auto j = parse_json_text(fuzz::as_text(data, size), "training");
  if (!j) return 0;
  auto t = spec::training_from_json(*j, "training");
  fuzz::check_error(t, "training_from_json");
  if (!t) return 0;
  fuzz::check(t->global_batch_size > 0 && t->seq_length > 0, "batch and sequence positive");
  auto back = spec::training_from_json(spec::training_to_json(*t), "training");
  fuzz::check(back.has_value(), "training round trip loads", back ? "" : back.error().to_string());
  fuzz::check(*back == *t, "training round trip is exact");
  return 0;
}
