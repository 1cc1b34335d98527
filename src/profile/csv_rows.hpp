// The CSV form of profile rows, which `mist profile import` reads and which the executor
// (`mist validate --timings`, `mist profile --csv`) and tools/gpu_profile.py write. The first line
// names the columns: device, op, kind, shape, dtype, pass, median_s, p10_s, p90_s, reps, source,
// date, in any order; other columns (a case name, min/max) are ignored. Fields may not contain
// commas or quotes (shape keys separate their dimensions with ';').
#pragma once

#include <string>
#include <vector>

#include "profile/database.hpp"

namespace mist::profile {

inline constexpr const char* kCsvHeader = "device,op,kind,shape,dtype,pass,median_s,p10_s,p90_s,reps,source,date";

// Every row, each validated; an error names the line (1 = the header) and the column:
// "line 3.median_s: must be a finite number of seconds > 0, got nan".
Result<std::vector<Measurement>> parse_csv(const std::string& text);
// One line of kCsvHeader's columns, no newline.
std::string csv_line(const Measurement& m);

}  // namespace mist::profile
