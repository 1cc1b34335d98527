#include "spec/engine.hpp"

#include <array>
#include <string>

namespace mist::spec {

namespace {
constexpr std::array<Engine, 3> kEngines{Engine::kMegatron, Engine::kDeepSpeed, Engine::kTorchtitan};
}  // namespace

const char* to_string(Engine e) {
  switch (e) {
    case Engine::kMegatron: return "megatron";
    case Engine::kDeepSpeed: return "deepspeed";
    case Engine::kTorchtitan: return "torchtitan";
  }
  return "?";
}

const char* display_name(Engine e) {
  switch (e) {
    case Engine::kMegatron: return "Megatron-LM";
    case Engine::kDeepSpeed: return "DeepSpeed";
    case Engine::kTorchtitan: return "torchtitan";
  }
  return "?";
}

Result<Engine> engine_from_string(std::string_view name) {
  for (Engine e : kEngines)
    if (name == to_string(e)) return e;
  return fail("engine", "unknown engine '" + std::string(name) + "' (megatron, deepspeed or torchtitan)");
}

std::span<const Engine> all_engines() { return kEngines; }

}  // namespace mist::spec
