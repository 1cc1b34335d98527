#include <fmt/format.h>

#include "cli/command.hpp"
#include "cli/report.hpp"

namespace mist::cli {

namespace {

std::string list_models() {
  std::string out = fmt::format("{:<18} {:>7} {:>7} {:>6} {:>4} {:>9} {:>8} {:>9} {:>9}  {}\n", "name", "layers",
                                "hidden", "heads", "kv", "ffn", "vocab", "params", "active", "family");
  for (const auto& n : spec::model_catalog_names()) {
    auto m = spec::catalog_model(n);
    if (!m) continue;
    // A mixture of experts lists its experts' width as experts x width.
    const std::string ffn = m->is_moe() ? fmt::format("{}x{}", m->num_experts, m->moe_ffn_hidden_size)
                                        : std::to_string(m->ffn_hidden_size);
    out += fmt::format("{:<18} {:>7} {:>7} {:>6} {:>4} {:>9} {:>8} {:>8.2f}B {:>8.2f}B  {}\n", m->name, m->num_layers,
                       m->hidden_size, m->num_heads, m->num_kv_heads, ffn, m->vocab_size, m->num_parameters() / 1e9,
                       m->num_active_parameters() / 1e9, m->family);
  }
  return out;
}

// The first clause of a catalog source, for one table line (docs/specs.md has them in full).
std::string short_source(const std::string& source) {
  std::string s = source.substr(0, source.find(';'));
  return s.size() > 70 ? s.substr(0, 67) + "..." : s;
}

std::string list_gpus() {
  std::string out = fmt::format("{:<18} {:>9} {:>10} {:>10} {:>9} {:>10} {:>5}  {}\n", "name", "memory",
                                "bf16 TF/s", "fp32 TF/s", "HBM TB/s", "link GB/s", "PCIe", "source");
  for (const auto& n : spec::gpu_catalog_names()) {
    auto g = spec::catalog_gpu(n);
    if (!g) continue;
    out += fmt::format("{:<18} {:>9} {:>10.1f} {:>10.1f} {:>9.3f} {:>10.0f} {:>5}  {}\n", g->name,
                       format_bytes(g->memory_bytes), g->bf16_flops / 1e12, g->fp32_flops / 1e12, g->mem_bw / 1e12,
                       g->link_bw / 1e9, g->pcie_gen, short_source(g->source));
  }
  return out;
}

}  // namespace

std::vector<Command> add_list_command(CLI::App& app) {
  auto what = std::make_shared<std::string>();
  auto* list = app.add_subcommand("list", "print a built-in catalog");
  list->add_option("catalog", *what, "models or gpus")->required()->check(CLI::IsMember({"models", "gpus"}));
  return {{list, [what](std::string& out, std::string&) {
             out = *what == "models" ? list_models() : list_gpus();
             return 0;
           }}};
}

}  // namespace mist::cli
