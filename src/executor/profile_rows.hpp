// From executor measurements to profile rows: each op's forward and backward times of a measured
// layer become rows of the profile database for the "cpu" device (docs/profile.md), keyed like the
// time model looks them up (the lowering's op names, profile::shape_key of the layer).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/result.hpp"
#include "executor/executor.hpp"
#include "plan/plan.hpp"
#include "profile/database.hpp"
#include "spec/cluster.hpp"

namespace mist::executor {

// The training setup the executor runs a BlockRun in (t = 1, fp32 main_grad, AdamW).
spec::TrainingSpec run_training(const BlockRun& r);
// The plan's K/V exchange for the run's (BlockRun::cp_exchange); none for torchtitan's all-gather
// rotation, which the executor does not run.
std::optional<plan::CpComm> run_cp_comm(const BlockRun& r);
// This machine as a one-device cluster: the catalog's "cpu" entry with the RAM it has.
spec::ClusterSpec cpu_cluster();
// "mist executor; LibTorch; 1 thread; thread CPU time; <CPU model>": what measured the rows and
// how (no commas: CSV).
std::string profile_source(int threads, bool thread_cpu_clock);
// Today's date, ISO 8601.
std::string today();

// One row per (op, pass) of the timed repetitions, median and 10th/90th percentiles, and one row
// per pass for the whole layer (op "block", "embedding" or "head", kind "layer"). Ops re-run by a checkpointed block's backward get
// pass "recompute" (kept for the record; the time model uses the forward's).
Result<std::vector<profile::Measurement>> profile_rows(const BlockRun& r, const BlockMeasurement& m,
                                                       const std::string& source, const std::string& date);

// The p-th percentile (0..1) by linear interpolation between order statistics.
double percentile(std::vector<double> v, double p);

}  // namespace mist::executor
