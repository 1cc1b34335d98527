// TrainingSpec: what is trained, independent of how it is parallelised.
#pragma once

#include <cstdint>
#include <string>

#include "core/json_fields.hpp"
#include "core/stated.hpp"

namespace mist::spec {

enum class Dtype { kFp32, kFp16, kBf16 };
enum class Optimizer { kAdamW, kSgd };

struct TrainingSpec {
  int64_t global_batch_size = 0;  // sequences per iteration
  int64_t seq_length = 0;         // s
  Dtype precision = Dtype::kBf16;   // weights and activations; fp16/bf16 = mixed precision
  Dtype grad_dtype = Dtype::kFp32;  // gradients are kept and reduced in this dtype
  Stated grad_dtype_stated;          // false: the file left grad_dtype out
  Optimizer optimizer = Optimizer::kAdamW;
  bool flash_attention = true;
  bool dropout = false;
  bool compile = false;  // torch.compile of the model's blocks (torchtitan's compile.enable)

  bool mixed_precision() const { return precision != Dtype::kFp32; }
  bool operator==(const TrainingSpec&) const = default;
};

Result<TrainingSpec> load_training(const std::string& path);
Result<TrainingSpec> training_from_json(const Json& j, const std::string& what);
Json training_to_json(const TrainingSpec& t);

int dtype_bytes(Dtype d);
const char* to_string(Dtype d);
const char* to_string(Optimizer o);

}  // namespace mist::spec
