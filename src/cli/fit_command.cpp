// `mist fit`: least-squares fit of the op-time model's efficiency constants (matmul fraction of
// peak, memory-bandwidth fraction, per-kernel launch cost) for one device from the measured op rows
// of a profile database; prints them with their residuals and writes the constants file a cluster's
// "time_constants" field applies (docs/time-model.md, "Fitting the op constants"). With --runs
// instead, the matmul efficiency of a stack from published iteration times (cli/fit_runs.cpp).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "cli/command.hpp"
#include "cli/commands.hpp"
#include "cli/fit_gemm_table.hpp"
#include "cli/fit_output.hpp"
#include "cli/fit_runs.hpp"
#include "cli/job.hpp"
#include "graph/lower.hpp"
#include "hardware/fit.hpp"
#include "hardware/op_cost.hpp"
#include "profile/database.hpp"
#include "spec/catalog.hpp"
#include "spec/cluster.hpp"

namespace mist::cli {

namespace {

struct FitArgs {
  std::string db, gpu, device, dtype = "", out;
  int test_every = 0;
  bool json = false, residuals = false;
  FitRunsArgs runs;
  std::string gemm_table;
};

Result<spec::GpuSpec> fit_gpu(const std::string& name_or_file) {
  if (name_or_file.ends_with(".json")) {
    auto j = read_json_file(name_or_file);
    if (!j) return fail("--gpu", j.error().to_string());
    return spec::detail::gpu_from_json(*j, "--gpu", nullptr);
  }
  auto g = spec::catalog_gpu(name_or_file);
  if (!g) return fail("--gpu", g.error().message);
  return g;
}


// "b=2;s=256;h=512;a=8;g=2;f=1408;t=1[;V=1000]" -> bindings; empty on a malformed key.
sym::Bindings parse_shape(const std::string& key) {
  sym::Bindings at;
  std::stringstream ss(key);
  for (std::string part; std::getline(ss, part, ';');) {
    const auto eq = part.find('=');
    if (eq == std::string::npos) return {};
    try {
      at[part.substr(0, eq)] = std::stod(part.substr(eq + 1));
    } catch (...) {
      return {};
    }
  }
  for (const char* s : {"b", "s", "h", "a", "g", "f", "t"})
    if (!at.contains(s)) return {};
  // Whole dimensions of a plausible size (the lowering takes them as integers).
  for (const auto& [name, v] : at)
    if (!(v >= 1 && v <= 1e9) || v != std::floor(v)) return {};
  return at;
}

// The lowered op a profile row measured: the row carries the op's name and kind and its layer's
// dimensions, not the model; the variants of the lowering (GELU or SwiGLU MLP, LayerNorm or RMSNorm,
// flash attention or not) name their ops apart, so the op is found by name in the variant that has it.
std::optional<graph::Op> find_op(const profile::Measurement& row, const sym::Bindings& at, int act_bytes) {
  const auto kind = graph::parse_op_kind(row.kind);
  if (!kind) return std::nullopt;
  spec::ModelSpec m;
  m.name = "fit";
  m.family = "gpt";
  m.num_layers = 1;
  m.hidden_size = static_cast<int64_t>(at.at("h"));
  m.num_heads = static_cast<int64_t>(at.at("a"));
  m.num_kv_heads = static_cast<int64_t>(at.at("g"));
  m.ffn_hidden_size = static_cast<int64_t>(at.at("f"));
  m.vocab_size = at.contains("V") ? static_cast<int64_t>(at.at("V")) : 1000;
  m.max_position_embeddings = static_cast<int64_t>(at.at("s"));
  m.qkv_bias = m.linear_bias = true;
  m.norm = *kind == graph::OpKind::kRmsNorm ? spec::Norm::kRmsNorm : spec::Norm::kLayerNorm;
  for (auto mlp : {spec::Mlp::kGelu, spec::Mlp::kSwiGlu})
    for (auto pos : {spec::Positions::kLearned, spec::Positions::kRotary})
    for (bool flash : {false, true}) {
      m.mlp = mlp;
      m.positions = pos;
      graph::LoweringOptions o;
      o.flash_attention = flash;
      o.dropout = true;
      o.act_bytes = act_bytes;
      const auto lm = graph::lower(m, static_cast<int64_t>(at.at("s")), o);
      for (const graph::Layer* L : {&lm.block, &lm.embedding, &lm.head})
        for (const auto& op : L->ops)
          if (op.name == row.op && op.kind == *kind) return op;
    }
  return std::nullopt;
}

// The features of one row, or nullopt when the row is not one op's pass that runs a kernel (whole
// layers, views, a residual add's pass-through backward: kept out and counted). The kernels are
// those op_time sums, linearised at the default constants.
std::optional<hardware::FitSample> sample_of(const profile::Measurement& row, const spec::GpuSpec& g, spec::Dtype d) {
  if (row.pass != "forward" && row.pass != "backward") return std::nullopt;
  const auto at = parse_shape(row.shape);
  if (at.empty()) return std::nullopt;
  const auto op = find_op(row, at, spec::dtype_bytes(d));
  if (!op) return std::nullopt;
  const auto pass = row.pass == "backward" ? hardware::Pass::kBackward : hardware::Pass::kForward;
  hardware::FitSample s;
  s.label = row.op + " " + row.pass + " " + row.shape;
  s.group = row.shape;
  s.seconds = row.median_s;
  hardware::add_kernels(s, g, hardware::op_kernels(*op, at, d, pass));
  if (s.kernels == 0) return std::nullopt;
  return s;
}

std::string pct(double x) { return fmt::format("{:.1f}%", 100 * x); }

int run_fit(const FitArgs& a, std::string& out, std::string& err) {
  if (!a.gemm_table.empty()) {
    if (!a.db.empty() || !a.runs.runs.empty() || !a.runs.test_runs.empty() || !a.device.empty() || a.test_every ||
        a.residuals)
      return invalid_input(err, Error{"--gemm-table", "takes --gpu, --dtype, --out and --json only"});
    return run_fit_gemm_table({a.gemm_table, a.gpu, a.dtype, a.out, a.json}, out, err);
  }
  if (a.db.empty() == a.runs.runs.empty())
    return invalid_input(err, Error{"--profile-db", "give one of --profile-db (measured op times) and --runs "
                                                    "(published iteration times)"});
  if (!a.runs.runs.empty()) {
    if (!a.gpu.empty() || !a.device.empty() || !a.dtype.empty() || a.test_every || a.residuals)
      return invalid_input(err, Error{"--runs", "takes the GPU and precision from the runs; --gpu, --device, --dtype, "
                                                "--test-every and --residuals belong to --profile-db"});
    FitRunsArgs r = a.runs;
    r.out = a.out;
    r.json = a.json;
    return run_fit_runs(r, out, err);
  }
  if (!a.runs.test_runs.empty()) return invalid_input(err, Error{"--test-runs", "needs --runs"});
  if (a.gpu.empty()) return invalid_input(err, Error{"--gpu", "is required with --profile-db"});
  auto gpu = fit_gpu(a.gpu);
  if (!gpu) return invalid_input(err, gpu.error());
  const std::string device = a.device.empty() ? gpu->name : a.device;
  // Opening would create a missing file; a fit needs measurements.
  if (!std::filesystem::exists(a.db))
    return invalid_input(err, Error{"--profile-db", "no such file: " + a.db});
  auto db = profile::Database::open(a.db);
  if (!db) return invalid_input(err, Error{"--profile-db", db.error().message});
  auto rows = db->all();
  if (!rows) return invalid_input(err, Error{"--profile-db", rows.error().message});
  // The dtype: as given, else the most common one among this device's rows.
  std::map<std::string, int> dtypes;
  for (const auto& r : *rows)
    if (r.device == device) dtypes[r.dtype] += 1;
  if (dtypes.empty())
    return invalid_input(err,
                         Error{"--device", fmt::format("the profile database has no rows for device '{}'", device)});
  std::string dtype_name = a.dtype;
  if (dtype_name.empty())
    dtype_name = std::max_element(dtypes.begin(), dtypes.end(), [](auto& x, auto& y) { return x.second < y.second; })->first;
  auto dtype = parse_dtype(dtype_name);
  if (!dtype) return invalid_input(err, dtype.error());

  std::vector<hardware::FitSample> samples;
  int skipped = 0;
  for (const auto& r : *rows) {
    if (r.device != device || r.dtype != dtype_name) continue;
    auto s = sample_of(r, *gpu, *dtype);
    if (s)
      samples.push_back(*s);
    else
      ++skipped;
  }
  // Held-out shapes: every n-th distinct shape key is kept out of the fit and scored apart.
  std::vector<hardware::FitSample> train, test;
  std::set<std::string> groups;
  for (const auto& s : samples) groups.insert(s.group);
  std::set<std::string> held;
  if (a.test_every > 1) {
    int i = 0;
    for (const auto& gk : groups)
      if (++i % a.test_every == 0) held.insert(gk);
  }
  for (const auto& s : samples) (held.contains(s.group) ? test : train).push_back(s);

  auto fitted = hardware::fit_constants(train);
  if (!fitted)
    return invalid_input(err, Error{"--profile-db." + fitted.error().path, fitted.error().message});
  const hardware::PerfConstants defaults;
  const auto test_before = hardware::relative_errors(test, defaults);
  const auto test_after = hardware::relative_errors(test, fitted->constants);

  Json prov = {{"command", "mist fit"}, {"profile_db", a.db}, {"date", fit_date()}, {"skipped_rows", skipped},
               {"held_out_rows", test_after.rows}};
  if (test_after.rows > 0) {
    prov["held_out_median_rel_error"] = test_after.median;
    prov["held_out_median_rel_error_defaults"] = test_before.median;
  }
  const Json constants = hardware::constants_to_json(*fitted, gpu->name, device, dtype_name, prov);
  if (auto done = emit_constants(constants, a.out, a.json, out, err)) return *done;
  const auto& c = fitted->constants;
  out += fmt::format("fitted op-time constants for {} (rows of device '{}', {}; {} rows used, {} skipped)\n",
                     gpu->name, device, dtype_name, fitted->after.rows, skipped);
  out += fmt::format("  matmul_efficiency  {:.4f} of the dense peak (default: {})\n", c.matmul_efficiency,
                     gpu->matmul_bf16_flops > 0 ? "the catalog's MAMF" : fmt::format("{}", defaults.default_matmul_efficiency));
  out += fmt::format("  hbm_efficiency     {}\n", fitted->fitted_hbm ? fmt::format("{:.4f} of peak bandwidth", c.hbm_efficiency)
                                                                      : "not fitted (the rows do not determine it): default");
  out += fmt::format("  kernel_launch_s    {}\n", fitted->fitted_launch ? fmt::format("{:.3g} s", c.kernel_launch_s)
                                                                         : "not fitted (rows do not determine it): default");
  out += fmt::format("  vector_TFLOPS      {}\n", fitted->fitted_vector
                                                   ? fmt::format("{:.4g} (elementwise math of memory-bound ops)", c.vector_flops / 1e12)
                                                   : "not fitted (the rows do not need it): elementwise math never binds");
  auto fa = [&](bool fitted, double e) {
    return fitted ? fmt::format("{:.4f} of the dense peak", e) : std::string("not fitted (no flash-attention rows): default");
  };
  out += fmt::format("  flash_fwd_eff      {}\n", fa(fitted->fitted_flash_fwd, c.flash_fwd_efficiency));
  out += fmt::format("  flash_bwd_eff      {}\n", fa(fitted->fitted_flash_bwd, c.flash_bwd_efficiency));
  out += fmt::format("relative error on the rows used: median {} max {} (defaults: median {} max {})\n",
                     pct(fitted->after.median), pct(fitted->after.max), pct(fitted->before.median),
                     pct(fitted->before.max));
  if (test_after.rows > 0)
    out += fmt::format("held-out shapes ({} rows): median {} max {} (defaults: median {} max {})\n", test_after.rows,
                       pct(test_after.median), pct(test_after.max), pct(test_before.median), pct(test_before.max));
  if (a.residuals) {
    out += "row (op pass shape)  measured_s  fitted_s  error  [held out]\n";
    for (const auto& s : samples) {
      const double p = hardware::predict(s, c);
      out += fmt::format("{}  {:.3g}  {:.3g}  {:+.1f}%{}\n", s.label, s.seconds, p, 100 * (p - s.seconds) / s.seconds,
                         held.contains(s.group) ? "  held out" : "");
    }
  }
  if (!a.out.empty()) out += fmt::format("wrote {} (a cluster's \"time_constants\" uses it)\n", a.out);
  return kExitOk;
}

}  // namespace

std::vector<Command> add_fit_command(CLI::App& app) {
  auto a = std::make_shared<FitArgs>();
  auto* sub = app.add_subcommand(
      "fit", "fit the op-time model's constants to measured op times, or its matmul efficiency to published runs");
  sub->add_option("--profile-db", a->db, "the profile database with measured op rows (docs/profile.md)");
  sub->add_option("--runs", a->runs.runs,
                  "instead: published iteration times as mist jobs (data/published/*.json); "
                  "fits the matmul efficiency");
  sub->add_option("--test-runs", a->runs.test_runs, "with --runs: runs held out of the fit, scored before and after");
  sub->add_option("--gemm-table", a->gemm_table,
                  "instead: measured GEMMs (CSV: b,m,n,k and seconds or flops_per_s); fits the GEMM model's "
                  "tile cost in k, rate and launch cost");
  sub->add_option("--gpu", a->gpu,
                  "with --profile-db or --gemm-table: catalog GPU name, or a GPU definition JSON file "
                  "(for the CPU: its peaks)");
  sub->add_option("--device", a->device, "the rows' device name (default: the GPU's name; 'cpu' for mist profile)");
  sub->add_option("--dtype", a->dtype, "fp32, bf16 or fp16 (default: the dtype most rows have)");
  sub->add_option("--out", a->out, "write the constants file here");
  sub->add_option("--test-every", a->test_every, "hold out every n-th shape and report the error on it")
      ->check(CLI::Range(0, 1000));
  sub->add_flag("--json", a->json, "print the constants file as JSON");
  sub->add_flag("--residuals", a->residuals, "also print every row: measured, fitted, relative error");
  return {{sub, [a](std::string& out, std::string& err) { return run_fit(*a, out, err); }}};
}

}  // namespace mist::cli
