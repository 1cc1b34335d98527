// Shared by the harnesses: the input as text, and checks that abort (a finding) when an invariant
// breaks. Inputs are any bytes; only crashes, sanitizer reports and broken invariants are findings,
// an error Result is the expected answer to bad input.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/json_fields.hpp"
#include "plan/plan.hpp"
#include "spec/cluster.hpp"
#include "spec/model.hpp"
#include "spec/training.hpp"

namespace mist::fuzz {

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

[[noreturn]] inline void violated(const char* what, const std::string& detail = "") {
  std::fprintf(stderr, "fuzz invariant violated: %s %s\n", what, detail.c_str());
  std::abort();
}

inline void check(bool ok, const char* what, const std::string& detail = "") {
  if (!ok) violated(what, detail);
}

// An error must name what is wrong: a message, never an empty one.
template <class R>
void check_error(const R& r, const char* what) {
  if (!r) check(!r.error().message.empty(), what, "error without a message");
}

inline void check_finite(double v, const char* what) { check(std::isfinite(v), what, std::to_string(v)); }

// A fixed, valid job to check plans and engine configs against: GPT-3 13B on 2x8 A100-80GB
// (examples/cluster_2x8_a100.json, examples/training_gpt.json).
struct FixedJob {
  spec::ModelSpec model;
  spec::ClusterSpec cluster;
  spec::TrainingSpec training;
};

inline const FixedJob& fixed_job() {
  static const FixedJob job = [] {
    FixedJob j;
    auto m = spec::catalog_model("gpt3-13b");
    auto c = spec::cluster_from_json(Json::parse(R"({"gpu": "A100-SXM4-80GB", "nodes": 2, "gpus_per_node": 8})"),
                                     "cluster");
    auto t = spec::training_from_json(
        Json::parse(R"({"global_batch_size": 512, "seq_length": 2048, "precision": "bf16"})"), "training");
    if (!m) violated("fixed job: model", m.error().to_string());
    if (!c) violated("fixed job: cluster", c.error().to_string());
    if (!t) violated("fixed job: training", t.error().to_string());
    j.model = *m;
    j.cluster = *c;
    j.training = *t;
    return j;
  }();
  return job;
}

}  // namespace mist::fuzz
