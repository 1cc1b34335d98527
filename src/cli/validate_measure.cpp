// `mist validate`: measures a sweep of transformer layers on this machine's CPU with the LibTorch
// executor and compares mist's memory predictions, and each layer's time predicted from a profile
// of its ops, with the measurements (docs/validation.md). Part of mist-measure; `mist` parses the
// options (validate_command.cpp) and forwards the command line.
#include <cmath>
#include <cstdio>
#include <fstream>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/measure_commands.hpp"
#include "core/json_fields.hpp"
#include "executor/validation.hpp"
#include "profile/database.hpp"

namespace mist::cli {

namespace {

std::string mib(double bytes) { return fmt::format("{:.3f}", bytes / (1024.0 * 1024.0)); }
std::string percent(double e) { return std::isfinite(e) ? fmt::format("{:+.2f}%", 100 * e) : "inf"; }
std::string bound_text(double b) { return b < 0 ? "reported" : b == 0 ? "exact" : fmt::format("±{:g}%", 100 * b); }

const char* term_description(const std::string& t) {
  if (t == "weights") return "parameters of one block in the training dtype";
  if (t == "gradients") return "fp32 main_grad of one block";
  if (t == "optimizer_states") return "AdamW state of one block (fp32 master when mixed, m, v)";
  if (t == "saved") return "activations one block keeps for backward, one micro-batch";
  if (t == "peak") return "activations of one block at their peak (activations + activation_transient)";
  if (t == "forward_peak") return "liveness: input + most bytes live during the forward";
  if (t == "backward_peak") return "liveness: most bytes live during the backward";
  if (t == "reserved")
    return "caching allocator's reserved peak: mist's allocation sequence of the layer vs the recorded one, replayed";
  if (t == "reserved_expandable") return "the same with expandable segments";
  if (t == "allocated_replay") return "allocated peak of the two replays";
  if (t == "block_time") return "forward+backward wall time of the layer, predicted from its ops' profile";
  return "";
}

std::string text(const executor::ValidationReport& r) {
  std::string out;
  const size_t width = 14;
  size_t name_w = 4;
  for (const auto& c : r.cases) name_w = std::max(name_w, c.c.name.size());
  for (size_t i = 0; i < r.summary.size(); ++i) {
    const auto& s = r.summary[i];
    const bool time = s.term == "block_time";
    out += fmt::format("{} ({}), bound {}{}\n", s.term, term_description(s.term), bound_text(s.bound),
                       s.median_bound >= 0 ? fmt::format(", median {}", bound_text(s.median_bound)) : "");
    out += fmt::format("  {:<{}} {:>{}} {:>{}} {:>9}{}\n", "case", name_w, time ? "predicted ms" : "predicted MiB", width,
                       time ? "measured ms" : "measured MiB", width, "error", time ? "  op times from the profile" : "");
    for (const auto& c : r.cases) {
      const auto& t = c.terms[i];
      const std::string flag = t.ok              ? ""
                               : t.gap.empty() ? "  FAIL"
                                               : fmt::format("  known gap {}: {} with it", t.gap, percent(t.error_with_gap));
      const auto value = [&](double v) { return time ? fmt::format("{:.3f}", 1e3 * v) : mib(v); };
      const auto& src = c.time.sources;
      const std::string sources = time ? fmt::format("  {} of {}", src.exact, src.total()) : "";
      out += fmt::format("  {:<{}} {:>{}} {:>{}} {:>9}{}{}\n", c.c.name, name_w, value(t.predicted), width,
                         value(t.measured), width, percent(t.error), sources, flag);
    }
    out += "\n";
  }
  out += fmt::format("summary over {} layers measured on this CPU\n", r.cases.size());
  out += fmt::format("  {:<18} {:>9} {:>10} {:>10}  {}\n", "term", "bound", "max |err|", "median", "status");
  for (const auto& s : r.summary) {
    std::string status = s.bound < 0 ? "-" : s.ok ? "ok" : "FAIL";
    if (s.median_bound >= 0) status += fmt::format(" (median bound {})", bound_text(s.median_bound));
    if (s.explained > 0) status += fmt::format(" ({} of {} beyond the bound, explained by a known gap)", s.explained, s.cases);
    out += fmt::format("  {:<18} {:>9} {:>10} {:>10}  {}\n", s.term, bound_text(s.bound),
                       fmt::format("{:.2f}%", 100 * s.max_abs_error), fmt::format("{:.2f}%", 100 * s.median_abs_error),
                       status);
  }
  out += r.ok ? "all bounded terms within their bounds or explained by a known gap (docs/validation.md)\n"
              : "some terms exceed their bounds\n";
  return out;
}

Json json(const executor::ValidationReport& r) {
  Json cases = Json::array();
  for (const auto& c : r.cases) {
    const auto& run = c.c.run;
    Json terms = Json::object();
    for (const auto& t : c.terms)
      terms[t.term] = {{t.term == "block_time" ? "predicted_s" : "predicted_bytes", t.predicted},
                       {t.term == "block_time" ? "measured_s" : "measured_bytes", t.measured},
                       {"error", std::isfinite(t.error) ? Json(t.error) : Json(nullptr)},
                       {"bound", t.bound}, {"ok", t.ok}};
    for (const auto& t : c.terms)
      if (!t.gap.empty()) terms[t.term]["known_gap"] = {{"name", t.gap}, {"error_with_gap", t.error_with_gap}};
    cases.push_back({{"name", c.c.name},
                     {"model", spec::model_to_json(run.model)},
                     {"seq_length", run.seq_length},
                     {"micro_batch", run.micro_batch},
                     {"dtype", spec::to_string(run.dtype)},
                     {"checkpoint", executor::to_string(run.checkpoint)},
                     {"flash_attention", run.flash_attention},
                     {"dropout", run.dropout},
                     {"terms", terms},
                     {"scratch_peak_bytes", c.measured.scratch_peak_bytes},
                     {"time", {{"predicted_forward_s", c.time.forward},
                               {"predicted_backward_s", c.time.backward},
                               {"measured_forward_s", c.measured_forward_s},
                               {"measured_backward_s", c.measured_backward_s},
                               {"op_sources", {{"exact", c.time.sources.exact},
                                               {"scaled", c.time.sources.scaled},
                                               {"analytical", c.time.sources.analytical}}}}},
                     {"seconds", c.seconds}});
  }
  Json summary = Json::array();
  for (const auto& s : r.summary)
    summary.push_back({{"term", s.term}, {"bound", s.bound}, {"cases", s.cases},
                       {"max_abs_error", s.max_abs_error}, {"median_abs_error", s.median_abs_error},
                       {"explained_by_known_gap", s.explained}, {"ok", s.ok},
                       {"median_bound", s.median_bound >= 0 ? Json(s.median_bound) : Json(nullptr)}});
  return {{"device", "cpu"}, {"ok", r.ok}, {"cases", cases}, {"summary", summary}};
}

}  // namespace

int validate(const ValidateArgs& a, std::string& out, std::string& err) {
  executor::ValidationOptions o;
  o.quick = a.quick;
  o.strict = a.strict;
  o.timing_reps = a.reps >= 0 ? a.reps : (a.quick ? 3 : 5);
  o.threads = a.threads;
  o.thread_cpu_clock = !a.wall_clock;
  if (a.verbose)
    o.on_case = [](const executor::CaseResult& c) {
      // Progress goes straight to stderr: a full sweep takes minutes.
      fmt::print(stderr, "{:<52} saved {:+.2f}%  peak {:+.2f}%  time {:+.1f}%  ({:.1f} s)\n", c.c.name,
                 100 * c.terms[3].error, 100 * c.terms[4].error, 100 * c.terms.back().error, c.seconds);
    };
  auto r = executor::run_validation(o);
  if (!r) {
    err = "mist: validate: " + r.error().to_string() + "\n";
    return kExitInternal;
  }
  if (!a.profile_db.empty()) {
    auto db = profile::Database::open(a.profile_db);
    if (!db) {
      err = fmt::format("mist: validate: --profile-db: {}\n", db.error().message);
      return kExitInvalidInput;
    }
    for (const auto& c : r->cases)
      if (auto ok = db->upsert(c.profile); !ok) {
        err = fmt::format("mist: validate: {}: {}\n", c.c.name, ok.error().to_string());
        return kExitInternal;
      }
  }
  if (!a.timings.empty()) {
    std::ofstream f(a.timings);
    f << executor::timings_csv(*r);
    if (!f) {
      err = fmt::format("mist: validate: cannot write {}\n", a.timings);
      return kExitInvalidInput;
    }
  }
  out = a.json ? json(*r).dump(2) + "\n" : text(*r);
  if (!r->ok) {
    err = "mist: validate: predictions and measurements disagree beyond the bounds\n";
    return kExitInternal;
  }
  return kExitOk;
}

}  // namespace mist::cli
