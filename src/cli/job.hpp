// The four inputs most commands take (--model --cluster --training --plan), loaded and checked.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "plan/plan.hpp"
#include "spec/cluster.hpp"
#include "spec/model.hpp"
#include "spec/training.hpp"

namespace mist::cli {

struct Job {
  spec::ModelSpec model;
  spec::ClusterSpec cluster;
  spec::TrainingSpec training;
  plan::Plan plan;
};

struct JobArgs {
  std::string model, cluster, training, plan;
};

// Adds --model, --cluster, --training and (when `with_plan`) --plan, all required.
void add_job_options(CLI::App* cmd, JobArgs& a, bool with_plan = true);
// Loads the files (or catalog names); without a plan file the plan is left default.
Result<Job> load_job(const JobArgs& a);

// Appends "mist: invalid input: <field>: <reason>" to `err`; returns exit status 2.
int invalid_input(std::string& err, const Error& e);

}  // namespace mist::cli
