// `mist profile --db F [--quick | --model M --training T]`: fills a profile database (docs/profile.md)
// with op times measured on this CPU by the LibTorch executor, a sweep of layers or the layers of
// a given model and training setup. Part of mist-measure; `mist` parses the options and runs
// `profile import` itself (profile_command.cpp).
#include <fstream>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/job.hpp"
#include "cli/measure_commands.hpp"
#include "executor/profile_rows.hpp"
#include "executor/validation.hpp"
#include "profile/csv_rows.hpp"
#include "profile/database.hpp"
#include "spec/model.hpp"
#include "spec/training.hpp"

namespace mist::cli {

namespace {

// The layers to measure: the validation sweep, or one block, the embedding and the head of a model.
Result<std::vector<executor::ValidationCase>> layers(const ProfileArgs& a) {
  if (a.model.empty()) return executor::validation_sweep(a.quick);
  MIST_TRY(auto m, spec::load_model(a.model));
  MIST_TRY(auto t, spec::load_training(a.training));
  if (t.precision == spec::Dtype::kFp16)
    return fail("training.precision", "fp16 has no CPU kernels in LibTorch; profile fp32 or bf16");
  if (t.fp8_training())
    return fail("training.precision", "fp8: LibTorch 1.13 has no FP8 dtypes or GEMMs on the CPU; profile bf16");
  std::vector<executor::ValidationCase> out;
  for (auto kind : {graph::LayerKind::kBlock, graph::LayerKind::kEmbedding, graph::LayerKind::kHead}) {
    executor::ValidationCase c;
    c.run.model = m;
    c.run.layer = kind;
    c.run.seq_length = t.seq_length;
    c.run.micro_batch = a.micro_batch;
    c.run.dtype = t.precision;
    c.run.flash_attention = t.flash_attention;
    c.run.dropout = t.dropout;
    c.name = fmt::format("{}-{}", m.name, kind == graph::LayerKind::kBlock ? "block"
                                          : kind == graph::LayerKind::kEmbedding ? "embedding" : "head");
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace

int measure_profile(const ProfileArgs& a, std::string& out, std::string& err) {
  if (!a.model.empty() && a.training.empty()) {
    err = "mist: invalid input: --training: is required with --model\n";
    return kExitInvalidInput;
  }
  auto cases = layers(a);
  if (!cases) return invalid_input(err, cases.error());
  auto db = profile::Database::open(a.db);
  if (!db) {
    err = fmt::format("mist: profile: --db: {}\n", db.error().message);
    return kExitInvalidInput;
  }
  const std::string source = executor::profile_source(a.threads, !a.wall_clock && a.threads == 1);
  const std::string date = executor::today();
  std::string csv = std::string(profile::kCsvHeader) + "\n";
  size_t n = 0;
  for (auto& c : *cases) {
    c.run.timing_reps = a.reps;
    c.run.threads = a.threads;
    c.run.thread_cpu_clock = !a.wall_clock && a.threads == 1;
    auto m = executor::measure_block(c.run);
    if (!m) {
      err = fmt::format("mist: profile: {}: {}\n", c.name, m.error().to_string());
      return kExitInternal;
    }
    auto rows = executor::profile_rows(c.run, *m, source, date);
    if (rows) {
      auto ok = db->upsert(*rows);
      if (!ok) rows = std::unexpected(ok.error());
    }
    if (!rows) {
      err = fmt::format("mist: profile: {}: {}\n", c.name, rows.error().to_string());
      return kExitInternal;
    }
    for (const auto& r : *rows) csv += profile::csv_line(r) + "\n";
    n += rows->size();
    out += fmt::format("{:<48} {} rows\n", c.name, rows->size());
  }
  if (!a.csv.empty()) {
    std::ofstream f(a.csv);
    f << csv;
    if (!f) {
      err = fmt::format("mist: profile: cannot write {}\n", a.csv);
      return kExitInvalidInput;
    }
  }
  out += fmt::format("stored {} rows for device cpu in {} ({} rows in all)\n", n, a.db, db->count().value_or(-1));
  return kExitOk;
}

}  // namespace mist::cli
