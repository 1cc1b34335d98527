#include "profile/database.hpp"

#include <cmath>

#include <fmt/format.h>
#include <sqlite3.h>

namespace mist::profile {

namespace {

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS op_times (
  device TEXT NOT NULL, op TEXT NOT NULL, shape TEXT NOT NULL, dtype TEXT NOT NULL, pass TEXT NOT NULL,
  kind TEXT NOT NULL, median_s REAL NOT NULL, p10_s REAL NOT NULL, p90_s REAL NOT NULL,
  reps INTEGER NOT NULL, source TEXT NOT NULL, date TEXT NOT NULL,
  PRIMARY KEY (device, op, shape, dtype, pass));
)sql";

constexpr const char* kColumns = "device, op, shape, dtype, pass, kind, median_s, p10_s, p90_s, reps, source, date";

// A prepared statement, finalized on scope exit.
struct Statement {
  sqlite3_stmt* s = nullptr;
  ~Statement() { sqlite3_finalize(s); }
};

Error sql_error(sqlite3* db, const std::string& what) {
  return Error{"profile_db", fmt::format("{}: {}", what, sqlite3_errmsg(db))};
}

std::string text_column(sqlite3_stmt* s, int i) {
  const unsigned char* t = sqlite3_column_text(s, i);
  return t ? reinterpret_cast<const char*>(t) : "";
}

Measurement read_row(sqlite3_stmt* s) {
  Measurement m;
  m.device = text_column(s, 0);
  m.op = text_column(s, 1);
  m.shape = text_column(s, 2);
  m.dtype = text_column(s, 3);
  m.pass = text_column(s, 4);
  m.kind = text_column(s, 5);
  m.median_s = sqlite3_column_double(s, 6);
  m.p10_s = sqlite3_column_double(s, 7);
  m.p90_s = sqlite3_column_double(s, 8);
  m.reps = sqlite3_column_int64(s, 9);
  m.source = text_column(s, 10);
  m.date = text_column(s, 11);
  return m;
}

bool positive_finite(double x) { return std::isfinite(x) && x > 0; }

}  // namespace

Result<void> validate(const Measurement& m) {
  for (auto [name, value] : {std::pair{"device", &m.device}, {"op", &m.op}, {"shape", &m.shape}, {"kind", &m.kind}})
    if (value->empty()) return fail(name, "must not be empty");
  // Text fields travel through CSV unquoted, and into SQLite as C strings (a NUL would cut the
  // key short there, so two different rows would collide; found by fuzz/profile_csv_fuzzer.cpp).
  for (auto [name, value] : {std::pair{"device", &m.device}, {"op", &m.op}, {"shape", &m.shape}, {"kind", &m.kind},
                             {"source", &m.source}, {"date", &m.date}}) {
    if (value->find('\0') != std::string::npos) return fail(name, "must not contain a NUL byte");
    if (value->find_first_of(",\"\n\r") != std::string::npos)
      return fail(name, fmt::format("must not contain a comma, quote or line break, got '{}'", *value));
  }
  if (m.dtype != "fp32" && m.dtype != "bf16" && m.dtype != "fp16")
    return fail("dtype", fmt::format("must be fp32, bf16 or fp16, got '{}'", m.dtype));
  if (m.pass != "forward" && m.pass != "backward" && m.pass != "recompute")
    return fail("pass", fmt::format("must be forward, backward or recompute, got '{}'", m.pass));
  for (auto [name, v] : {std::pair{"median_s", m.median_s}, {"p10_s", m.p10_s}, {"p90_s", m.p90_s}})
    if (!positive_finite(v)) return fail(name, fmt::format("must be a finite number of seconds > 0, got {}", v));
  if (m.p10_s > m.median_s) return fail("p10_s", fmt::format("must be at most median_s ({}), got {}", m.median_s, m.p10_s));
  if (m.p90_s < m.median_s) return fail("p90_s", fmt::format("must be at least median_s ({}), got {}", m.median_s, m.p90_s));
  if (m.reps < 1) return fail("reps", fmt::format("must be at least 1, got {}", m.reps));
  return {};
}

void Database::Close::operator()(sqlite3* db) const { sqlite3_close(db); }

Result<Database> Database::open(const std::string& path) {
  sqlite3* raw = nullptr;
  const int rc = sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  Database d(raw);  // closes `raw` on every path below, even when the open failed
  if (rc != SQLITE_OK) return std::unexpected(sql_error(raw, fmt::format("cannot open '{}'", path)));
  d.path_ = path;
  sqlite3_busy_timeout(raw, 5000);
  if (sqlite3_exec(raw, kSchema, nullptr, nullptr, nullptr) != SQLITE_OK)
    return std::unexpected(sql_error(raw, fmt::format("'{}' is not a mist profile database", path)));
  Statement get;
  sqlite3_prepare_v2(raw, "SELECT value FROM meta WHERE key = 'schema_version'", -1, &get.s, nullptr);
  if (sqlite3_step(get.s) == SQLITE_ROW) {
    const std::string v = text_column(get.s, 0);
    if (v != std::to_string(kSchemaVersion))
      return fail("profile_db", fmt::format("'{}' has schema version {}; this mist reads version {}", path, v,
                                            kSchemaVersion));
  } else {
    const auto set = fmt::format("INSERT INTO meta VALUES ('schema_version', '{}')", kSchemaVersion);
    if (sqlite3_exec(raw, set.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK)
      return std::unexpected(sql_error(raw, "cannot write the schema version"));
  }
  return d;
}

Result<void> Database::upsert(const std::vector<Measurement>& rows) {
  for (size_t i = 0; i < rows.size(); ++i)
    if (auto ok = validate(rows[i]); !ok)
      return fail(fmt::format("rows[{}].{}", i, ok.error().path), ok.error().message);
  sqlite3* db = db_.get();
  if (sqlite3_exec(db, "BEGIN", nullptr, nullptr, nullptr) != SQLITE_OK) return std::unexpected(sql_error(db, "BEGIN"));
  Statement ins;
  const auto sql = fmt::format("INSERT OR REPLACE INTO op_times ({}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", kColumns);
  bool ok = sqlite3_prepare_v2(db, sql.c_str(), -1, &ins.s, nullptr) == SQLITE_OK;
  for (size_t i = 0; ok && i < rows.size(); ++i) {
    const auto& m = rows[i];
    int c = 1;
    for (const std::string* t : {&m.device, &m.op, &m.shape, &m.dtype, &m.pass, &m.kind})
      sqlite3_bind_text(ins.s, c++, t->c_str(), -1, SQLITE_TRANSIENT);
    for (double v : {m.median_s, m.p10_s, m.p90_s}) sqlite3_bind_double(ins.s, c++, v);
    sqlite3_bind_int64(ins.s, c++, m.reps);
    sqlite3_bind_text(ins.s, c++, m.source.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(ins.s, c++, m.date.c_str(), -1, SQLITE_TRANSIENT);
    ok = sqlite3_step(ins.s) == SQLITE_DONE;
    sqlite3_reset(ins.s);
  }
  if (!ok) {
    Error e = sql_error(db, "cannot write measurements");
    sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
    return std::unexpected(e);
  }
  if (sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK) return std::unexpected(sql_error(db, "COMMIT"));
  return {};
}

Result<std::optional<Measurement>> Database::find(const std::string& device, const std::string& op,
                                                  const std::string& shape, const std::string& dtype,
                                                  const std::string& pass) const {
  Statement q;
  const auto sql = fmt::format(
      "SELECT {} FROM op_times WHERE device = ? AND op = ? AND shape = ? AND dtype = ? AND pass = ?", kColumns);
  if (sqlite3_prepare_v2(db_.get(), sql.c_str(), -1, &q.s, nullptr) != SQLITE_OK)
    return std::unexpected(sql_error(db_.get(), "cannot query"));
  int c = 1;
  for (const std::string* t : {&device, &op, &shape, &dtype, &pass})
    sqlite3_bind_text(q.s, c++, t->c_str(), -1, SQLITE_TRANSIENT);
  const int rc = sqlite3_step(q.s);
  if (rc == SQLITE_ROW) return read_row(q.s);
  if (rc == SQLITE_DONE) return std::nullopt;
  return std::unexpected(sql_error(db_.get(), "cannot query"));
}

Result<std::vector<Measurement>> Database::all() const {
  Statement q;
  const auto sql = fmt::format("SELECT {} FROM op_times ORDER BY device, op, shape, dtype, pass", kColumns);
  if (sqlite3_prepare_v2(db_.get(), sql.c_str(), -1, &q.s, nullptr) != SQLITE_OK)
    return std::unexpected(sql_error(db_.get(), "cannot query"));
  std::vector<Measurement> out;
  int rc;
  while ((rc = sqlite3_step(q.s)) == SQLITE_ROW) out.push_back(read_row(q.s));
  if (rc != SQLITE_DONE) return std::unexpected(sql_error(db_.get(), "cannot read measurements"));
  return out;
}

Result<int64_t> Database::count() const {
  Statement q;
  if (sqlite3_prepare_v2(db_.get(), "SELECT COUNT(*) FROM op_times", -1, &q.s, nullptr) != SQLITE_OK ||
      sqlite3_step(q.s) != SQLITE_ROW)
    return std::unexpected(sql_error(db_.get(), "cannot count"));
  return sqlite3_column_int64(q.s, 0);
}

}  // namespace mist::profile
