// The four inputs most commands take (--model --cluster --training --plan), loaded and checked.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "api/failure.hpp"
#include "api/inputs.hpp"
#include "job/job.hpp"
#include "job/prepare.hpp"

namespace mist::cli {

using job::Job;

struct JobArgs {
  std::string model, cluster, training, plan;
};

// --engine (the software stack, default megatron), --uncalibrated and --headroom (tune and gpus,
// add_headroom_option): which calibration prepare uses.
using CalibrationArgs = api::Calibration;

// Adds --model, --cluster, --training and (when `with_plan`) --plan, all required.
void add_job_options(CLI::App* cmd, JobArgs& a, bool with_plan = true);
// Adds --engine (unless the command has its own) and --uncalibrated.
void add_calibration_options(CLI::App* cmd, CalibrationArgs& a, bool with_engine = true);
// Adds --headroom (default: the memory band, analysis::kMemoryBand): what tune and gpus leave free.
void add_headroom_option(CLI::App* cmd, CalibrationArgs& a);
using api::prepare_options;
// Loads the files (or catalog names) with api::load_job; without a plan file the plan is left
// default. The files the cluster file names are kept for job::prepare, which reads them.
Result<Job> load_job(const JobArgs& a);

// Appends "mist: invalid input: <field>: <reason>" to `err`; returns exit status 2.
int invalid_input(std::string& err, const Error& e);
// Appends "mist: " and the failure's message to `err`; returns its exit status (1 for an internal
// error, else 2).
int failed(std::string& err, const api::Failure& f);

}  // namespace mist::cli
