// The Debug ASan+UBSan build runs 5-10x slower: tests that loop over many jobs, or fit constants by
// repeated prediction, take a subset there (everything still runs in the normal build).
#pragma once

namespace mist::testing {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif

}  // namespace mist::testing
