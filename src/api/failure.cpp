#include "api/failure.hpp"

namespace mist::api {

std::string Failure::message() const {
  switch (kind) {
    case Kind::kInvalidInput: return "invalid input: " + error.to_string();
    case Kind::kSearch: return error.to_string();
    case Kind::kInternal: return "internal error: " + error.to_string();
  }
  return error.to_string();
}

}  // namespace mist::api
