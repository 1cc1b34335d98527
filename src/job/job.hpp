// A training job as a user states it: the model, the cluster's hardware, the training settings, a
// plan (when there is one), and the files the cluster file names. The one bundle that the command
// line, the published-run checks and the benchmarks share.
#pragma once

#include "plan/plan.hpp"
#include "spec/cluster.hpp"
#include "spec/model.hpp"
#include "spec/training.hpp"

namespace mist::job {

struct Job {
  spec::ModelSpec model;
  spec::ClusterSpec cluster;
  spec::TrainingSpec training;
  plan::Plan plan;
  spec::CalibrationFiles files;
};

}  // namespace mist::job
