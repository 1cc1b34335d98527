// Unit constants. Specs carry units in their JSON keys ("memory_GiB", "mem_bw_TBps") and are
// converted to SI base units (bytes, bytes/s, FLOP/s, seconds) once, at parse time.
#pragma once

#include <cstdint>

namespace mist::units {

inline constexpr double kKiB = 1024.0;
inline constexpr double kMiB = 1024.0 * 1024.0;
inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
inline constexpr double kGB = 1e9;
inline constexpr double kTB = 1e12;
inline constexpr double kTFLOPS = 1e12;
inline constexpr double kMicrosecond = 1e-6;

// Largest byte count mist will report: 2^60 (1 EiB). Anything above is rejected as absurd input
// long before a 64-bit count could overflow.
inline constexpr double kMaxBytes = 1152921504606846976.0;

}  // namespace mist::units
