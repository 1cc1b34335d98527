// torchtitan (pytorch/torchtitan @ kTorchtitanSource.commit): plans to `--section.field value`
// overrides and back. At that commit a run is a Python config function chosen with --module and
// --config (there is no TOML any more); the overrides, frozen in
// tests/unit_tests/test_no_new_cli_options.py, still take precedence over it.
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "export/exchange.hpp"
#include "export/flags.hpp"

namespace mist::engines {

// The overrides for a plan torchtitan can run (expressible(p, Engine::kTorchtitan, ..., &t)); the
// activation checkpointing policy is the tyro subcommand "activation-checkpoint:none|full", last.
// --module and --config come first: torchtitan's config for the model's shape, or the one the notes
// ask the user to add (torchtitan_models.hpp).
std::vector<Option> torchtitan_options(const spec::ModelSpec& m, const spec::TrainingSpec& t, const plan::Plan& p);
std::vector<std::string> torchtitan_notes(const spec::ModelSpec& m, const spec::TrainingSpec& t, const plan::Plan& p);

// Overrides (hyphens or underscores, as tyro takes both) as a plan for `m` on `c`. Options not
// given take torchtitan's dataclass defaults, which a recipe may have changed: give them all.
Result<ImportedJob> import_torchtitan_overrides(std::string_view overrides, const spec::ModelSpec& m,
                                                const spec::ClusterSpec& c);

// Every override the exporter writes or the importer reads (without the subcommand tokens).
std::span<const FlagSpec> torchtitan_flag_specs();
std::span<const std::string_view> torchtitan_subcommands();

}  // namespace mist::engines
