// Profile CSV import (mist profile import): what parses validates, round-trips through csv_line,
// and goes into an in-memory database, where every key finds its last row.
#include <map>
#include <tuple>

#include "fuzz_util.hpp"
#include "profile/csv_rows.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mist;
  const std::string text(fuzz::as_text(data, size));
  auto rows = profile::parse_csv(text);
  fuzz::check_error(rows, "parse_csv");
  if (!rows) return 0;
  std::string again = std::string(profile::kCsvHeader) + "\n";
  for (const auto& m : *rows) {
    auto ok = profile::validate(m);
    fuzz::check(ok.has_value(), "a parsed row validates", ok ? "" : ok.error().to_string());
    again += profile::csv_line(m) + "\n";
  }
  auto back = profile::parse_csv(again);
  fuzz::check(back.has_value(), "csv_line output parses", back ? "" : back.error().to_string());
  fuzz::check(*back == *rows, "csv round trip is exact");
  auto db = profile::Database::open(":memory:");
  fuzz::check(db.has_value(), "in-memory database opens", db ? "" : db.error().to_string());
  auto up = db->upsert(*rows);
  fuzz::check_error(up, "upsert");
  if (!up) return 0;
  std::map<std::tuple<std::string, std::string, std::string, std::string, std::string>, profile::Measurement> last;
  for (const auto& m : *rows) last[{m.device, m.op, m.shape, m.dtype, m.pass}] = m;
  auto n = db->count();
  fuzz::check(n.has_value() && *n == static_cast<int64_t>(last.size()), "one row per key");
  for (const auto& [key, m] : last) {
    auto found = db->find(m.device, m.op, m.shape, m.dtype, m.pass);
    fuzz::check(found.has_value() && found->has_value() && **found == m, "a key finds its last row");
  }
  return 0;
}
