// `mist profile`: `mist profile import` adds rows from CSV files (tools/gpu_profile.py writes them)
// to a profile database (docs/profile.md); the measuring form, `mist profile --db F ...`, is parsed
// here and runs in mist-measure (profile_measure.cpp), which links LibTorch.
#include <fstream>
#include <memory>
#include <sstream>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/measure_commands.hpp"
#include "cli/measure_forward.hpp"
#include "profile/csv_rows.hpp"
#include "profile/database.hpp"

namespace mist::cli {

namespace {

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

}  // namespace

std::vector<Command> add_profile_command(CLI::App& app, const std::vector<std::string>& args) {
  auto a = std::make_shared<ProfileArgs>();
  auto* p = add_profile_options(app, *a);
  auto* imp = p->add_subcommand("import", "import profile rows from CSV files (docs/profile.md has the columns)");
  imp->add_option("files", a->files, "CSV files")->required();
  imp->fallthrough();  // --db belongs to `profile`
  // `import` first: run() takes the first parsed command, and `profile` is parsed with it.
  return {{imp, [a](std::string& o, std::string& e) { return import_rows(*a, o, e); }},
          {p, [a, args](std::string&, std::string& e) { return forward_to_measure("profile", args, e); }}};
}

}  // namespace mist::cli
