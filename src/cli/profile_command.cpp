// `mist profile`: fills a profile database (docs/profile.md) with op times measured on this CPU by
// the LibTorch executor (a sweep of layers, or the layers of a given model and training setup),
// and `mist profile import` adds rows from CSV files (tools/gpu_profile.py writes them).
#include <fstream>
#include <memory>
#include <sstream>

#include <fmt/format.h>

#include "cli/command.hpp"
#include "cli/commands.hpp"
#include "cli/job.hpp"
#include "profile/csv_rows.hpp"
#include "profile/database.hpp"
#include "spec/model.hpp"
#include "spec/training.hpp"
#ifdef MIST_WITH_TORCH
#include "executor/profile_rows.hpp"
#include "executor/validation.hpp"
#endif

namespace mist::cli {

namespace {

struct ProfileArgs {
  std::string db, model, training, csv;
  bool quick = false, wall_clock = false;
  int64_t micro_batch = 1;
  int reps = 5, threads = 1;
  std::vector<std::string> files;  // import
};

Result<profile::Database> open_db(const std::string& path) {
  auto db = profile::Database::open(path);
  if (!db) return fail("--db", db.error().message);
  return db;
}

int import_rows(const ProfileArgs& a, std::string& out, std::string& err) {
  auto db = open_db(a.db);
  if (!db) {
    err = fmt::format("mist: profile import: {}\n", db.error().to_string());
    return kExitInvalidInput;
  }
  std::vector<profile::Measurement> rows;
  for (const auto& f : a.files) {
    std::ifstream in(f);
    if (!in) {
      err = fmt::format("mist: profile import: cannot read {}\n", f);
      return kExitInvalidInput;
    }
    std::stringstream text;
    text << in.rdbuf();
    auto parsed = profile::parse_csv(text.str());
    if (!parsed) {
      err = fmt::format("mist: invalid input: {} (in {})\n", parsed.error().to_string(), f);
      return kExitInvalidInput;
    }
    rows.insert(rows.end(), parsed->begin(), parsed->end());
  }
  // All files or none: one transaction.
  if (auto ok = db->upsert(rows); !ok) {
    err = fmt::format("mist: profile import: {}\n", ok.error().to_string());
    return kExitInternal;
  }
  out = fmt::format("imported {} rows into {} ({} rows in all)\n", rows.size(), a.db, db->count().value_or(-1));
  return kExitOk;
}

#ifdef MIST_WITH_TORCH
// The layers to measure: the validation sweep, or one block, the embedding and the head of a model.
Result<std::vector<executor::ValidationCase>> layers(const ProfileArgs& a) {
  if (a.model.empty()) return executor::validation_sweep(a.quick);
  MIST_TRY(auto m, spec::load_model(a.model));
  MIST_TRY(auto t, spec::load_training(a.training));
  if (t.precision == spec::Dtype::kFp16)
    return fail("training.precision", "fp16 has no CPU kernels in LibTorch; profile fp32 or bf16");
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

int measure(const ProfileArgs& a, std::string& out, std::string& err) {
  if (!a.model.empty() && a.training.empty()) {
    err = "mist: invalid input: --training: is required with --model\n";
    return kExitInvalidInput;
  }
  auto cases = layers(a);
  if (!cases) return invalid_input(err, cases.error());
  auto db = open_db(a.db);
  if (!db) {
    err = fmt::format("mist: profile: {}\n", db.error().to_string());
    return kExitInvalidInput;
  }
  const std::string source = executor::profile_source(a.threads, !a.wall_clock && a.threads == 1), date = executor::today();
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
#endif

}  // namespace

std::vector<Command> add_profile_command(CLI::App& app) {
  auto a = std::make_shared<ProfileArgs>();
  auto* p = app.add_subcommand("profile", "measure op times on this CPU (LibTorch) into a profile database, or import rows");
  p->add_option("--db", a->db, "the profile database (SQLite; created when missing)")->required();
  std::vector<Command> out;
#ifdef MIST_WITH_TORCH
  p->add_flag("--quick", a->quick, "the small validation sweep (8 layers) instead of the full one (41)");
  p->add_option("--model", a->model, "profile this model's block, embedding and head instead of the sweep");
  p->add_option("--training", a->training, "training JSON (seq_length, precision, flash_attention, dropout) for --model");
  p->add_option("--micro-batch", a->micro_batch, "micro-batch size for --model (default 1)")->check(CLI::Range(1, 4096));
  p->add_option("--reps", a->reps, "timed repetitions per layer (default 5)")->check(CLI::Range(1, 100));
  p->add_option("--threads", a->threads, "intra-op threads of LibTorch and OpenBLAS (default 1)")->check(CLI::Range(1, 1024));
  p->add_option("--csv", a->csv, "also write the rows to this CSV file");
  p->add_flag("--wall-clock", a->wall_clock,
              "time with the wall clock (default with one thread: the thread's CPU time, robust to a busy machine)");
#endif
  auto* imp = p->add_subcommand("import", "import profile rows from CSV files (docs/profile.md has the columns)");
  imp->add_option("files", a->files, "CSV files")->required();
  imp->fallthrough();  // --db belongs to `profile`
  out.push_back({imp, [a](std::string& o, std::string& e) { return import_rows(*a, o, e); }});
  out.push_back({p, [a](std::string& o, std::string& e) {
#ifdef MIST_WITH_TORCH
                   return measure(*a, o, e);
#else
                   (void)o;
                   e = "mist: profile: measuring needs LibTorch (this mist was built without it); "
                       "'mist profile import' works\n";
                   return kExitInternal;
#endif
                 }});
  return out;
}

}  // namespace mist::cli
