// Suggestions for a mistyped name ("unknown GPU \"H100\" (closest: H100-SXM5-80GB, ...)").
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace mist {

// The `n` names of `names` most like `query`, most alike first, ties in the order given. Case is
// ignored. A name that contains the query ("H100" in "H100-SXM5-80GB") comes before one that does
// not; then one that contains every '-'-separated part of it ("A100-80GB" in "A100-SXM4-80GB");
// then by edit distance.
std::vector<std::string> closest_names(const std::string& query, std::vector<std::string> names, size_t n = 3);

}  // namespace mist
