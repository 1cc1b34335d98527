// TrainingSpec: defaults, round trip, dtype rules and bad input.
#include "spec/training.hpp"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "../common/expect.hpp"

namespace mist::spec {
namespace {

using mist::testing::parse;
using mist::testing::expect_error;

Result<TrainingSpec> training(std::string_view text) {
  return training_from_json(parse(text), "training");
}

TEST(Training, Defaults) {
  auto t = training(R"({"global_batch_size": 64, "seq_length": 2048})");
  ASSERT_TRUE(t.has_value()) << t.error().to_string();
  EXPECT_EQ(t->global_batch_size, 64);
  EXPECT_EQ(t->seq_length, 2048);
  EXPECT_EQ(t->precision, Dtype::kBf16);
  EXPECT_EQ(t->grad_dtype, Dtype::kFp32);
  EXPECT_EQ(t->optimizer, Optimizer::kAdamW);
  EXPECT_TRUE(t->flash_attention);
  EXPECT_FALSE(t->dropout);
  EXPECT_TRUE(t->mixed_precision());
}

TEST(Training, RoundTrip) {
  for (const char* text :
       {R"({"global_batch_size": 1, "seq_length": 1, "precision": "fp32", "optimizer": "sgd",
            "flash_attention": false, "dropout": true})",
        R"({"global_batch_size": 512, "seq_length": 4096, "precision": "fp16",
            "grad_dtype": "fp16"})",
        R"({"global_batch_size": 8, "seq_length": 8192, "precision": "bf16",
            "grad_dtype": "bf16"})"}) {
    auto t = training(text);
    ASSERT_TRUE(t.has_value()) << t.error().to_string();
    auto back = training_from_json(parse(training_to_json(*t).dump()), "training");
    ASSERT_TRUE(back.has_value()) << back.error().to_string();
    EXPECT_EQ(*back, *t);
  }
}

TEST(Training, GradDtypeRules) {
  expect_error(training(R"({"global_batch_size": 8, "seq_length": 128, "precision": "fp32",
      "grad_dtype": "fp16"})"),
               "training.grad_dtype", "fp32");
  expect_error(training(R"({"global_batch_size": 8, "seq_length": 128, "precision": "bf16",
      "grad_dtype": "fp16"})"),
               "training.grad_dtype", "training precision");
}

TEST(Training, BadInput) {
  expect_error(training(R"({"seq_length": 2048})"), "training.global_batch_size", "missing");
  expect_error(training(R"({"global_batch_size": 64})"), "training.seq_length", "missing");
  expect_error(training(R"({"global_batch_size": 0, "seq_length": 2048})"),
               "training.global_batch_size", "at least 1");
  expect_error(training(R"({"global_batch_size": -8, "seq_length": 2048})"),
               "training.global_batch_size", "at least 1");
  expect_error(training(R"({"global_batch_size": 1e10, "seq_length": 2048})"),
               "training.global_batch_size", "at most");
  expect_error(training(R"({"global_batch_size": 64, "seq_length": 20000000})"),
               "training.seq_length", "at most");
  // Beyond 64-bit integers (issue 18): out of range, not "must be an integer".
  for (const char* big : {R"({"global_batch_size": 18446744073709551617, "seq_length": 2048})",
                          R"({"global_batch_size": 18446744073709551615, "seq_length": 2048})",
                          R"({"global_batch_size": 1e30, "seq_length": 2048})"}) {
    auto t = training(big);
    expect_error(t, "training.global_batch_size", "out of range");
    if (!t) {
      EXPECT_NE(t.error().message.find("at most"), std::string::npos) << t.error().message;
    }
  }
  expect_error(training(R"({"global_batch_size": -1e30, "seq_length": 2048})"), "training.global_batch_size",
               "out of range");
  expect_error(training(R"({"global_batch_size": 64.5, "seq_length": 2048})"),
               "training.global_batch_size", "integer");
  expect_error(training(R"({"global_batch_size": "64", "seq_length": 2048})"),
               "training.global_batch_size", "integer");
  expect_error(training(R"({"global_batch_size": 64, "seq_length": 2048, "precision": "int8"})"),
               "training.precision", "one of");
  expect_error(training(R"({"global_batch_size": 64, "seq_length": 2048, "precision": "fp8", "fp8_recipe": "e4m3"})"),
               "training.fp8_recipe", "one of");
  expect_error(training(R"({"global_batch_size": 64, "seq_length": 2048, "fp8_recipe": "delayed"})"),
               "training.fp8_recipe", "\"fp8\" only");
  expect_error(training(R"({"global_batch_size": 64, "seq_length": 2048, "precision": "fp8", "grad_dtype": "fp16"})"),
               "training.grad_dtype", "fp8");
  expect_error(training(R"({"global_batch_size": 64, "seq_length": 2048, "optimizer": "adam"})"),
               "training.optimizer", "one of");
  expect_error(training(R"({"global_batch_size": 64, "seq_length": 2048, "flash_attention": 1})"),
               "training.flash_attention", "true or false");
  expect_error(training(R"({"global_batch_size": 64, "seq_length": 2048, "micro_batch": 2})"),
               "training.micro_batch", "unknown");
  expect_error(training("[]"), "training", "JSON object");
}

// "precision": "fp8": bf16 outside the FP8 GEMMs, with a recipe (tensorwise unless stated); the
// JSON form round-trips and the header names both.
TEST(Training, Fp8PrecisionWithRecipe) {
  auto t = training(R"({"global_batch_size": 64, "seq_length": 2048, "precision": "fp8"})");
  ASSERT_TRUE(t.has_value()) << t.error().to_string();
  EXPECT_EQ(t->precision, Dtype::kBf16);
  EXPECT_EQ(t->fp8, Fp8Recipe::kTensorwise);
  EXPECT_TRUE(t->fp8_training());
  EXPECT_EQ(precision_name(*t), "fp8 (tensorwise)");
  auto d = training(R"({"global_batch_size": 64, "seq_length": 2048, "precision": "fp8", "fp8_recipe": "blockwise",
                        "grad_dtype": "bf16"})");
  ASSERT_TRUE(d.has_value()) << d.error().to_string();
  EXPECT_EQ(d->fp8, Fp8Recipe::kBlockwise);
  EXPECT_EQ(d->grad_dtype, Dtype::kBf16);
  const Json j = training_to_json(*d);
  EXPECT_EQ(j.at("precision"), "fp8");
  EXPECT_EQ(j.at("fp8_recipe"), "blockwise");
  EXPECT_EQ(*training_from_json(j, "training"), *d);
  auto b = training(R"({"global_batch_size": 64, "seq_length": 2048})");
  EXPECT_FALSE(b->fp8_training());
  EXPECT_FALSE(training_to_json(*b).contains("fp8_recipe"));
  EXPECT_EQ(dtype_bytes(Dtype::kFp8), 1);
}

// "compile_loss": torchtitan's compile.components holding "loss"; left out, the loss is compiled
// with the blocks (torchtitan's default); it needs "compile".
TEST(Training, CompileLoss) {
  auto t = training(R"({"global_batch_size": 8, "seq_length": 128, "compile": true})");
  ASSERT_TRUE(t.has_value()) << t.error().to_string();
  EXPECT_TRUE(t->compiled_loss());
  EXPECT_FALSE(training_to_json(*t).contains("compile_loss"));
  auto eager_loss = training(R"({"global_batch_size": 8, "seq_length": 128, "compile": true, "compile_loss": false})");
  ASSERT_TRUE(eager_loss.has_value()) << eager_loss.error().to_string();
  EXPECT_FALSE(eager_loss->compiled_loss());
  EXPECT_EQ(*training_from_json(training_to_json(*eager_loss), "training"), *eager_loss);
  auto none = training(R"({"global_batch_size": 8, "seq_length": 128, "compile_loss": false})");
  ASSERT_TRUE(none.has_value()) << none.error().to_string();
  EXPECT_FALSE(none->compiled_loss());
  expect_error(training(R"({"global_batch_size": 8, "seq_length": 128, "compile_loss": true})"),
               "training.compile_loss", "\"compile\": true");
}

TEST(Training, LoadFromFile) {
  const auto file = std::filesystem::temp_directory_path() / ("mist_spec_test_training-" + std::to_string(::getpid()) + ".json");
  std::ofstream(file) << R"({"global_batch_size": 128, "seq_length": 2048, "precision": "fp16"})";
  auto t = load_training(file.string());
  ASSERT_TRUE(t.has_value()) << t.error().to_string();
  EXPECT_EQ(t->precision, Dtype::kFp16);
  std::ofstream(file) << R"({"global_batch_size": 128, "seq_length": 2048,)";
  expect_error(load_training(file.string()), file.string(), "malformed");
  std::filesystem::remove(file);
}

TEST(Training, DtypeHelpers) {
  EXPECT_EQ(dtype_bytes(Dtype::kFp32), 4);
  EXPECT_EQ(dtype_bytes(Dtype::kFp16), 2);
  EXPECT_EQ(dtype_bytes(Dtype::kBf16), 2);
  EXPECT_STREQ(to_string(Dtype::kBf16), "bf16");
  EXPECT_STREQ(to_string(Optimizer::kSgd), "sgd");
}

}  // namespace
}  // namespace mist::spec
