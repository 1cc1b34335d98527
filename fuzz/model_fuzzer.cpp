// Model input: a catalog name, a Hugging Face config.json or mist's own form. What loads must be
// a valid model and survive model_to_json -> model_from_json unchanged.
#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mist;
  const auto text = fuzz::as_text(data, size);
  if (size < 40) {  // short inputs are also tried as catalog names
    auto m = spec::catalog_model(std::string(text));
    fuzz::check_error(m, "catalog_model");
  }
  auto j = parse_json_text(text, "model");
  if (!j) return 0;
  auto m = spec::model_from_json(*j, "model");
  fuzz::check_error(m, "model_from_json");
  if (!m) return 0;
  auto valid = spec::validate_model(*m, "model");
  fuzz::check(valid.has_value(), "a loaded model validates", valid ? "" : valid.error().to_string());
  fuzz::check(m->num_parameters() > 0, "parameter count positive", std::to_string(m->num_parameters()));
  auto back = spec::model_from_json(spec::model_to_json(*m), "model");
  fuzz::check(back.has_value(), "model round trip loads", back ? "" : back.error().to_string());
  fuzz::check(*back == *m, "model round trip is exact");
  return 0;
}
