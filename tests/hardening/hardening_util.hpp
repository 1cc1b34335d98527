// Helpers of the hardening tests: jobs from JSON text, and "this is an error naming that field".
#pragma once

#include <cmath>
#include <string>

#include <gtest/gtest.h>

#include "analysis/memory_model.hpp"
#include "analysis/prepared_job.hpp"
#include "analysis/time_model.hpp"

namespace mist::hardening {

inline Json parse(const std::string& text) { return Json::parse(text); }

// The error names `field` (its path begins with it, or the message mentions it).
template <class R>
::testing::AssertionResult fails_naming(const R& r, const std::string& field) {
  if (r) return ::testing::AssertionFailure() << "accepted, expected an error naming " << field;
  const std::string all = r.error().to_string();
  if (all.find(field) == std::string::npos)
    return ::testing::AssertionFailure() << "error does not name " << field << ": " << all;
  return ::testing::AssertionSuccess();
}

struct Prediction {
  Result<analysis::MemoryPrediction> memory;
  Result<analysis::TimePrediction> time;
};

// The two parts of analysis::predict apart, each after the same checks, so that a memory refusal
// does not hide what the time model does with the same input.
inline Prediction predict(const spec::ModelSpec& m, const spec::ClusterSpec& c, const spec::TrainingSpec& t,
                          const plan::Plan& p) {
  auto job = analysis::PreparedJob::create(m, c, t);
  if (!job) return {std::unexpected(job.error()), std::unexpected(job.error())};
  if (auto ok = plan::validate_plan(p, m, c, t); !ok) return {std::unexpected(ok.error()), std::unexpected(ok.error())};
  return {analysis::stage_memory(*job, p), analysis::iteration_time(*job, p)};
}

// Each prediction is an error or reports only finite, non-negative numbers. (They may disagree:
// stage_memory refuses a stage needing more than any machine has, iteration_time does not.)
inline ::testing::AssertionResult finite_or_error(const Prediction& p) {
  if (p.memory) {
    for (const auto& s : p.memory->stages) {
      if (!std::isfinite(s.peak_bytes) || s.peak_bytes < 0)
        return ::testing::AssertionFailure() << "stage " << s.index << " peak " << s.peak_bytes;
      for (const auto& term : s.terms)
        if (!std::isfinite(term.bytes)) return ::testing::AssertionFailure() << term.name << " = " << term.bytes;
    }
  } else if (p.memory.error().message.empty()) {
    return ::testing::AssertionFailure() << "memory error without a message";
  }
  if (p.time) {
    const auto& t = *p.time;
    for (double v : {t.iteration_time_s, t.tokens_per_s, t.mfu, t.model_tflops_per_gpu})
      if (!std::isfinite(v) || v < 0) return ::testing::AssertionFailure() << "time quantity " << v;
    if (!(t.iteration_time_s > 0)) return ::testing::AssertionFailure() << "iteration time " << t.iteration_time_s;
  } else if (p.time.error().message.empty()) {
    return ::testing::AssertionFailure() << "time error without a message";
  }
  return ::testing::AssertionSuccess();
}

}  // namespace mist::hardening
