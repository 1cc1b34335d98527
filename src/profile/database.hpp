// The profile database: measured op times in an SQLite file, one row per
// (device, op, shape, dtype, pass) with the median, the 10th and 90th percentiles, the number of
// repetitions, which tool measured it where, and when. docs/profile.md has the schema.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/result.hpp"

struct sqlite3;

namespace mist::profile {

inline constexpr int kSchemaVersion = 1;

struct Measurement {
  // The key.
  std::string device;  // catalog name of the device ("cpu", "H100-SXM5-80GB")
  std::string op;      // the lowering's op name ("attn.qkv"), or "block"/"embedding"/"head" for a whole layer
  std::string shape;   // shape key (op_source.hpp: shape_key), "b=2;s=256;h=512;..."
  std::string dtype;   // "fp32", "bf16", "fp16"
  std::string pass;    // "forward", "backward" (or "recompute": kept, never looked up)
  // The measurement.
  std::string kind;    // the lowering's op kind ("linear", "flash_attention", ...): picks the scaling rule
  double median_s = 0, p10_s = 0, p90_s = 0;
  int64_t reps = 0;
  std::string source;  // which tool on which machine ("mist profile, 1 thread, AMD EPYC")
  std::string date;    // ISO date of the measurement

  bool operator==(const Measurement&) const = default;
};

// Checks one row: a non-empty key, a known pass and dtype, finite positive times with
// p10 <= median <= p90, at least one repetition. The error names the field.
Result<void> validate(const Measurement& m);

// An open database. Move-only; closes the file when destroyed.
class Database {
 public:
  // Opens (creating it when missing) the SQLite file at `path`; ":memory:" gives a private
  // in-memory database. A file written by another schema version is refused.
  static Result<Database> open(const std::string& path);
  // Inserts or replaces rows by key, all or none (one transaction); every row is validated first.
  Result<void> upsert(const std::vector<Measurement>& rows);
  Result<std::optional<Measurement>> find(const std::string& device, const std::string& op, const std::string& shape,
                                          const std::string& dtype, const std::string& pass) const;
  Result<std::vector<Measurement>> all() const;
  Result<int64_t> count() const;

 private:
  struct Close {
    void operator()(sqlite3* db) const;
  };
  explicit Database(sqlite3* db) : db_(db) {}
  std::unique_ptr<sqlite3, Close> db_;
  std::string path_;
};

}  // namespace mist::profile
