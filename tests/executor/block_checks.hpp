// The executor's measurement of one block against the memory model's prediction of it, as the
// block tests check it (MoE, context parallelism).
#pragma once

#include <gtest/gtest.h>

#include "allocator/caching_allocator.hpp"
#include "executor/executor.hpp"
#include "executor/validation.hpp"

namespace mist::executor::testing {

// Model state, saved bytes and the stage peak exact; without recompute the forward and backward
// peaks exact and mist's allocation sequence requesting the measured peak (and, with
// `reserved`, the caching allocator reserving as much for it as for the recorded sequence); under
// full recompute the backward peak exact (the replay's: bwd_peak_recomputed) and the forward
// bounded by the block's without recompute.
inline void expect_block_matches_model(const BlockRun& r, bool reserved = true) {
  auto m = measure_block(r);
  ASSERT_TRUE(m) << m.error().to_string();
  auto p = predict_block(r);
  ASSERT_TRUE(p) << p.error().to_string();
  EXPECT_EQ(m->input_bytes, p->input_bytes);
  EXPECT_EQ(m->weight_bytes, p->weights);
  EXPECT_EQ(m->gradient_bytes, p->gradients);
  EXPECT_EQ(m->optimizer_bytes, p->optimizer_states);
  EXPECT_EQ(m->saved_bytes, p->saved);
  // The memory model's peak (activations + activation_transient of a one-block stage).
  EXPECT_EQ(m->peak_bytes(), p->peak);
  if (r.checkpoint == CheckpointMode::kFull) {
    EXPECT_EQ(m->backward_peak_bytes, p->backward_peak);
    EXPECT_GE(p->forward_peak, m->forward_peak_bytes);
  } else {
    EXPECT_EQ(m->forward_peak_bytes, p->forward_peak);
    EXPECT_EQ(m->backward_peak_bytes, p->backward_peak);
    const auto seq = predicted_allocation_sequence(*p, m->output_freed);
    const auto mist = allocator::replay(seq);
    EXPECT_EQ(mist.requested_bytes.peak, m->peak_bytes());
    if (reserved) {
      EXPECT_EQ(mist.reserved_bytes.peak, allocator::replay(m->recorded).reserved_bytes.peak);
    }
  }
  EXPECT_TRUE(m->step_ok);
}

}  // namespace mist::executor::testing
