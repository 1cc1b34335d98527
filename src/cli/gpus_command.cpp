// `mist gpus`: the tuned plan, throughput, time and cost of a job on each candidate GPU type and
// count (src/advisor, docs/gpus.md).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>

#include <fmt/format.h>

#include "api/gpus.hpp"
#include "cli/command.hpp"
#include "cli/commands.hpp"
#include "cli/job.hpp"
#include "cli/html_report.hpp"
#include "cli/report.hpp"

namespace mist::cli {

namespace {

struct GpusArgs {
  std::string model, training;
  api::GpusRequest request;  // the options below but --gpus-per-node and --json
  int64_t gpus_per_node = 0;  // 0: the catalog's node size per GPU type
  std::string html;           // --html: the report, written here
  bool json = false;
};

// "dp 2 tp 4 pp 2 mb 1 G 64 sel zero 11 ckpt 3/40,0/40 off w.5": enough to recognise the plan.
std::string plan_summary(const plan::Plan& p) {
  std::string zero, ckpt, off;
  for (const auto& s : p.stages) {
    zero += std::to_string(s.zero);
    ckpt += (ckpt.empty() ? "" : ",") + std::to_string(s.ckpt_layers) + "/" + std::to_string(s.num_layers);
    if (s.offload.weights + s.offload.gradients + s.offload.optimizer_states + s.offload.activations > 0) off = " offload";
  }
  return fmt::format("dp {} tp {} pp {}{} mb {} G {}{} zero {} ckpt {}{}", p.dp, p.tp, p.pp, extra_degrees_text(p),
                     p.micro_batch_size,
                     p.grad_accum_steps, p.recompute == plan::Recompute::kSelective ? " sel" : "", zero, ckpt, off);
}

std::string format_duration(double s) {
  if (s >= 2 * 86400) return fmt::format("{:.1f} d", s / 86400);
  if (s >= 3600) return fmt::format("{:.1f} h", s / 3600);
  return fmt::format("{:.0f} min", s / 60);
}

std::string money(double usd) {
  if (usd >= 1e6) return fmt::format("${:.2f}M", usd / 1e6);
  if (usd >= 1e4) return fmt::format("${:.0f}k", usd / 1e3);
  return fmt::format("${:.2f}", usd);
}

// "  [PCIe only: 12% exposed tail]" after the plan of a row over several nodes of a GPU without NVLink.
std::string network_mark(const advisor::Row& r) {
  if (!r.pcie_only) return "";
  return r.feasible ? fmt::format("  [PCIe only: {:.0f}% exposed tail]", 100 * r.pcie_only->exposed_share)
                    : "  [PCIe only]";
}

// "; AWS p5.48xlarge, 8 GPUs" when the price names its instance.
std::string instance_text(const advisor::GpuPrice& p) {
  std::string s;
  if (!p.instance.empty()) s += "; " + p.instance;
  if (p.gpus_per_instance == 1) s += ", a 1-GPU instance";
  if (p.gpus_per_instance > 1) s += fmt::format(", {}-GPU instance ÷ {}", p.gpus_per_instance, p.gpus_per_instance);
  return s;
}

// One line per GPU type with a PCIe-only row: what its network does.
std::string network_notes(const advisor::Comparison& cmp) {
  std::string out;
  std::vector<std::string> seen;
  for (const auto& r : cmp.rows) {
    if (!r.pcie_only || std::find(seen.begin(), seen.end(), r.gpu) != seen.end()) continue;
    seen.push_back(r.gpu);
    if (out.empty()) out = "PCIe only (no NVLink), over several nodes:\n";
    out += fmt::format("  {}: tensor parallelism stays inside a node over PCIe ({:.0f} GB/s per GPU); pipeline "
                       "sends and gradient reduction cross the NIC at {:g} GB/s per GPU; exposed tail = what the last "
                       "micro-batch leaves exposed (gradient reduction, ZeRO gathers, optimizer step), share of "
                       "the iteration\n",
                       r.gpu, r.pcie_only->pcie_bytes_per_s / 1e9, r.pcie_only->inter_node_bytes_per_s / 1e9);
  }
  return out;
}

std::string text_table(const advisor::Comparison& cmp, const api::GpusRequest& a) {
  std::string out = fmt::format("{:<16} {:>5} {:>5} {:>4} {:>10} {:>6} {:>9} {:>9} {:>8} {:>9} {:>2}  {}\n", "gpu",
                                "GPUs", "nodes", "fits", "tokens/s", "MFU", "time", "$/hour", "$/Mtok", "total", "P",
                                "plan");
  for (const auto& r : cmp.rows) {
    const bool costed = r.feasible && r.price;
    out += fmt::format(
        "{:<16} {:>5} {:>5} {:>4} {:>10} {:>6} {:>9} {:>9} {:>8} {:>9} {:>2}  {}\n", r.gpu, r.num_gpus, r.nodes,
        r.feasible ? "yes" : "no", r.feasible ? fmt::format("{:.0f}", r.tokens_per_s) : "-",
        r.feasible ? fmt::format("{:.1f}%", 100 * r.mfu) : "-", r.feasible ? format_duration(r.time_to_train_s) : "-",
        costed ? money(r.cost.usd_per_hour) : r.price ? "-" : "no price",
        costed ? fmt::format("${:.3f}", r.cost.usd_per_million_tokens) : "-", costed ? money(r.cost.usd_total) : "-",
        r.pareto ? "*" : "", (r.feasible ? plan_summary(*r.plan) : r.reason) + network_mark(r));
  }
  out += fmt::format("\n{:g} tokens; rows by total cost (unpriced, then infeasible rows last); * = on the "
                     "time-vs-cost Pareto set; {} space\n",
                     a.tokens, a.space_name());
  out += "smallest count that fits:";
  std::vector<std::string> seen;
  for (const auto& r : cmp.rows) {
    if (std::find(seen.begin(), seen.end(), r.gpu) != seen.end()) continue;
    seen.push_back(r.gpu);
    auto it = cmp.smallest_fitting.find(r.gpu);
    out += it == cmp.smallest_fitting.end() ? fmt::format(" {} none of those tried;", r.gpu)
                                            : fmt::format(" {} {};", r.gpu, it->second);
  }
  out.back() = '\n';
  out += "prices (US$ per GPU-hour, on demand):\n";
  for (const auto& g : seen) {
    const advisor::Row* r = nullptr;
    for (const auto& x : cmp.rows)
      if (x.gpu == g) r = &x;
    out += r->price ? fmt::format("  {}: ${} ({}{}; {})\n", g, r->price->usd_per_gpu_hour, r->price->date,
                                  instance_text(*r->price), r->price->source)
                    : fmt::format("  {}: no price (give one with --prices)\n", g);
  }
  out += network_notes(cmp);
  return out;
}

int gpus(const GpusArgs& a, std::string& out, std::string& err) {
  auto model = api::load_model({a.model, {}, "--model"});
  if (!model) return invalid_input(err, model.error());
  auto training = api::load_training({a.training, {}, "--training"});
  if (!training) return invalid_input(err, training.error());
  api::GpusRequest request = a.request;
  if (a.gpus_per_node != 0) request.gpus_per_node = a.gpus_per_node;
  if (isatty(STDERR_FILENO))
    request.progress = [](size_t done, size_t total) {
      if (done < total)
        std::fprintf(stderr, "\rtuned %zu of %zu cells (GPU type x count)", done, total);
      else
        std::fprintf(stderr, "\r%50s\r", "");
      std::fflush(stderr);
    };
  auto cmp = api::gpus(*model, *training, request);
  if (!cmp) return failed(err, cmp.error());
  if (!a.html.empty())
    if (int code = write_html(a.html, gpus_report(*model, *training, request, *cmp), err)) return code;
  out = a.json ? api::gpus_json(*model, request, *cmp).dump(2) + "\n" : text_table(*cmp, request);
  if (cmp->smallest_fitting.empty()) {
    err = "mist: the job fits none of the GPU types and counts tried; try more GPUs or GPUs with more memory.\n";
    return kExitNoFit;
  }
  return kExitOk;
}

}  // namespace

std::vector<Command> add_gpus_command(CLI::App& app) {
  auto a = std::make_shared<GpusArgs>();
  auto* g = app.add_subcommand("gpus", "compare GPU types and counts: tuned plan, tokens/s, time and cost to train");
  g->add_option("--model", a->model,
                "catalog name (mist list models) or a JSON file: a Hugging Face config.json or mist's model form")
      ->required();
  g->add_option("--training", a->training, "training JSON file: global_batch_size, seq_length, precision, ...")
      ->required();
  g->add_option("--candidates", a->request.candidates, "GPU types to compare, comma-separated (mist list gpus)")
      ->required()
      ->delimiter(',');
  g->add_option("--gpus", a->request.counts, "GPU counts to try for each type, comma-separated")
      ->delimiter(',')
      ->capture_default_str();
  g->add_option("--tokens", a->request.tokens, "tokens to train on (for the time and cost to finish)")->capture_default_str();
  g->add_option("--prices", a->request.prices,
                "JSON file of [{\"gpu\", \"usd_per_gpu_hour\", \"date\", \"source\"}] replacing the built-in prices");
  g->add_option("--space", a->request.space, "search space: mist, megatron or deepspeed")->capture_default_str();
  g->add_option("--engine", a->request.engine,
                "only plans this engine can run (megatron, deepspeed, torchtitan), with the time model's calibration "
                "for that stack (default: megatron's)");
  add_calibration_options(g, a->request.calibration, /*with_engine=*/false);
  add_headroom_option(g, a->request.calibration);
  g->add_option("--gpus-per-node", a->gpus_per_node, "node size for every GPU type (default: the catalog's)")
      ->check(CLI::Range(1, api::kMaxGpusPerNode));
  g->add_option("--profile-db", a->request.profile_db,
                "measured op times (docs/profile.md); other GPU types' rows are scaled Habitat-style");
  g->add_option("--threads", a->request.threads, "cells tuned at once")->check(CLI::Range(1, api::kMaxThreads))->capture_default_str();
  g->add_flag("--fast", a->request.fast, "coarser offload grid {0, 0.5, 1} (mist space): faster, may miss a little");
  g->add_option("--html", a->html, "write a report to this file: time to train against cost, the Pareto set");
  g->add_flag("--json", a->json, "print {rows: [...], smallest_fitting} as JSON");
  return {{g, [a](std::string& out, std::string& err) { return gpus(*a, out, err); }}};
}

}  // namespace mist::cli
