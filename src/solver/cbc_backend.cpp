// The CBC backend: COIN-OR CBC 2.10 through its C API. The only file of mist that includes a
// CBC header. How CBC's statuses map onto Termination is tabled in docs/solver.md; the facts it
// rests on were read from Cbc_C_Interface.cpp of CBC 2.10.8 and checked by tests/solver:
// - Cbc_solve() hands a model without integer variables straight to Clp (no time limit, no
//   cutoff, Cbc_status() stays −1, Clp's log on stdout whatever "log" says, and an unbounded LP
//   reported as "infeasible") and runs CbcMain1, CBC's command-line driver, otherwise. mist
//   adds one fixed integer column to such models so that every model takes the second path.
// - Settings go in as command-line arguments (Cbc_setParameter), which CbcMain1 parses with
//   global state: hence one lock around every use of CBC.
// - Cbc_addCol copies a column's name into a buffer it grows by at most 512 bytes, unchecked:
//   CBC gets short generated names ("x17", "r3"), never the user's.
// - Cbc_solve() catches a CoinError thrown in CbcMain1 itself, printing it on stdout; the status
//   then stays −1, which mist reports as a call error.
// - A time limit that ends during preprocessing reads as "infeasible" (status 0, secondary 1):
//   CbcMain1 skips preprocessing only if the limit has passed already (CbcSolver.cpp:4086),
//   otherwise hands CglPreProcess what is left (CbcSolver.cpp:4395); CglPreProcess runs its passes
//   only while its own clock is within that (CglPreProcess.cpp:2365, Cgl 0.60.3), returns the
//   model it started from as NULL when no pass ran (:2217), and CbcMain1 reads NULL as infeasible
//   (CbcSolver.cpp:4445-4452). See time_may_have_ended().
#include <Cbc_C_Interface.h>
#include <CoinError.hpp>

#include <algorithm>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <ctime>
#include <memory>
#include <mutex>

#include <fmt/format.h>

#include "solver/backends.hpp"

namespace mist::solver::detail {
namespace {

// CBC's statuses (Cbc_C_Interface.h): Cbc_status() and Cbc_secondaryStatus().
constexpr int kStatusFinished = 0, kStatusStopped = 1, kStatusAbandoned = 2, kStatusUserEvent = 5;
constexpr int kSecondaryCompleted = 0, kSecondaryRelaxationInfeasible = 1, kSecondaryStoppedOnGap = 2,
              kSecondaryStoppedOnTime = 4, kSecondaryRelaxationUnbounded = 7;
// CBC reports "no bound" and "no solution" as huge numbers (1e50, DBL_MAX) rather than inf.
constexpr double kCbcHuge = 1e49;

using CbcPtr = std::unique_ptr<Cbc_Model, decltype(&Cbc_deleteModel)>;

std::mutex& cbc_lock() {
  static std::mutex m;
  return m;
}

// Shortest text that reads back to the same double.
std::string arg(double x) { return fmt::format("{}", x); }

double to_cbc(double bound) { return std::isinf(bound) ? std::copysign(DBL_MAX, bound) : bound; }

double bound_from_cbc(double b, double offset) {
  return std::isfinite(b) && std::abs(b) < kCbcHuge ? b + offset : -kInfinity;
}

void load(Cbc_Model* cbc, const MilpModel& model) {
  std::vector<double> cost(static_cast<size_t>(model.num_variables()), 0.0);
  for (const Term& t : model.objective().terms) cost[static_cast<size_t>(t.var.index)] += t.coef;
  for (int i = 0; i < model.num_variables(); ++i) {
    const VariableData& v = model.variables()[static_cast<size_t>(i)];
    Cbc_addCol(cbc, fmt::format("x{}", i).c_str(), to_cbc(v.lower), to_cbc(v.upper), cost[static_cast<size_t>(i)],
               v.type == VarType::kContinuous ? 0 : 1, 0, nullptr, nullptr);
  }
  std::vector<int> cols;
  std::vector<double> coefs;
  for (int r = 0; r < model.num_constraints(); ++r) {
    const ConstraintData& c = model.constraints()[static_cast<size_t>(r)];
    cols.clear();
    coefs.clear();
    for (const Term& t : c.terms) {
      cols.push_back(t.var.index);
      coefs.push_back(t.coef);
    }
    const char sense = c.sense == Sense::kLessEqual ? 'L' : c.sense == Sense::kGreaterEqual ? 'G' : 'E';
    Cbc_addRow(cbc, fmt::format("r{}", r).c_str(), static_cast<int>(cols.size()), cols.data(), coefs.data(),
               sense, c.rhs);
  }
  // Cbc_solve() hands a model without integer variables to Clp directly, skipping CbcMain1:
  // no time limit, no cutoff, and a log the C API cannot silence. One integer column fixed at
  // 0, in no row and not in the objective, keeps every model on CbcMain1; it is not reported.
  if (!model.has_integer_variables()) Cbc_addCol(cbc, "fixed_integer", 0.0, 0.0, 0.0, 1, 0, nullptr, nullptr);
  Cbc_setObjSense(cbc, 1.0);  // minimise
}

void configure(Cbc_Model* cbc, const MilpModel& model, const SolveOptions& o) {
  Cbc_setParameter(cbc, "log", o.log ? "1" : "0");
  Cbc_setParameter(cbc, "timeMode", "elapsed");  // the limit is wall-clock, as documented
  if (std::isfinite(o.time_limit_s)) Cbc_setParameter(cbc, "sec", arg(o.time_limit_s).c_str());
  Cbc_setParameter(cbc, "ratioGap", arg(o.relative_gap).c_str());
  // CBC's default (0 threads) is its serial search; n > 1 threads as 100 + n selects its
  // deterministic parallel mode, so results do not depend on thread timing.
  if (o.threads > 1) Cbc_setParameter(cbc, "threads", fmt::format("{}", 100 + o.threads).c_str());
  // CBC knows nothing of the objective offset.
  if (o.cutoff) Cbc_setParameter(cbc, "cutoff", arg(*o.cutoff - model.objective().offset).c_str());
}

// Integer values as exact integers (CBC returns 0.9999999996), never −0: the same solution then
// prints the same everywhere. Values too far from an integer stay, and validation rejects them.
std::vector<double> clean(const MilpModel& model, const double* x) {
  std::vector<double> values(x, x + model.num_variables());
  for (size_t i = 0; i < values.size(); ++i) {
    double& v = values[i];
    if (model.variables()[i].type != VarType::kContinuous && std::abs(v - std::round(v)) <= kIntegralityTolerance)
      v = std::round(v);
    if (v == 0.0) v = 0.0;
  }
  return values;
}

std::string cbc_detail(Cbc_Model* cbc, const char* what) {
  return fmt::format("CBC {} (status {}, secondary status {})", what, Cbc_status(cbc), Cbc_secondaryStatus(cbc));
}

// How long Cbc_solve() ran, on each clock CBC may read: wall time with "timeMode elapsed" (the
// steady clock, and the calendar clock CoinGetTimeOfDay() reads), and the process's CPU time
// that CBC's CoinCpuTime() reads in places whatever timeMode says.
class SolveClock {
 public:
  SolveClock()
      : steady_(std::chrono::steady_clock::now()), system_(std::chrono::system_clock::now()), cpu_(std::clock()) {}
  // The longest of the three, in seconds.
  double longest_s() const {
    const double steady = std::chrono::duration<double>(std::chrono::steady_clock::now() - steady_).count();
    const double system = std::chrono::duration<double>(std::chrono::system_clock::now() - system_).count();
    const double cpu = double(std::clock() - cpu_) / CLOCKS_PER_SEC;
    return std::max({steady, system, cpu});
  }

 private:
  std::chrono::steady_clock::time_point steady_;
  std::chrono::system_clock::time_point system_;
  std::clock_t cpu_;
};

// CBC's clock starts inside Cbc_solve() (CbcStartSeconds, CbcSolver.cpp:2011), after this one, so
// a CBC answer given before the time limit on CBC's clock was given before it on this clock too.
// When this clock has reached the limit, an "infeasible" may be a time-out in preprocessing (see
// the top of this file) and is no proof.
bool time_may_have_ended(const SolveOptions& o, double solve_s) {
  return std::isfinite(o.time_limit_s) && solve_s >= o.time_limit_s;
}

// Reads what CbcMain1 left in the model; solve_s is how long Cbc_solve() ran (SolveClock).
Result<SolveResult> read_mip(Cbc_Model* cbc, const MilpModel& model, const SolveOptions& o, double solve_s) {
  const int status = Cbc_status(cbc), secondary = Cbc_secondaryStatus(cbc);
  const int64_t nodes = Cbc_getNodeCount(cbc);
  const double offset = model.objective().offset;
  const double* incumbent = Cbc_bestSolution(cbc);  // null when CBC found no solution
  const double bound = bound_from_cbc(Cbc_getBestPossibleObjValue(cbc), offset);

  if (status == kStatusAbandoned)
    return without_solution({.reason = TerminationReason::kNumericalError,
                             .detail = cbc_detail(cbc, "abandoned the search on numerical difficulties")},
                            -kInfinity, nodes);
  if (status == kStatusFinished) {
    if (incumbent && secondary == kSecondaryCompleted) {
      SolveResult r = with_solution(model, {.reason = TerminationReason::kOptimal, .detail = cbc_detail(cbc, "completed the search")},
                                    clean(model, incumbent), bound, nodes);
      r.best_bound = r.objective;  // the completed search is the proof; CBC's bound may lag by its increment
      return r;
    }
    if (incumbent && secondary == kSecondaryStoppedOnGap)
      return with_solution(model, {.reason = TerminationReason::kOptimal,
                                   .detail = cbc_detail(cbc, fmt::format("stopped within the relative gap {}", o.relative_gap).c_str())},
                           clean(model, incumbent), bound, nodes);
    if (!incumbent && secondary == kSecondaryRelaxationUnbounded)
      return without_solution({.reason = TerminationReason::kUnbounded,
                               .detail = cbc_detail(cbc, "found the LP relaxation unbounded: the model is unbounded "
                                                         "(or, rarely, integer infeasible)")},
                              -kInfinity, nodes);
    if (!incumbent && (secondary == kSecondaryRelaxationInfeasible || Cbc_isProvenInfeasible(cbc))) {
      if (time_may_have_ended(o, solve_s))
        return without_solution(
            {.reason = TerminationReason::kNoSolutionFound, .limit = Limit::kTime,
             .detail = cbc_detail(cbc, fmt::format("reported the model infeasible after its time limit ({} s) had "
                                                   "passed, which its preprocessing also reports when the limit "
                                                   "ends it: no proof", o.time_limit_s).c_str())},
            -kInfinity, nodes);
      // CBC cannot tell "infeasible" from "nothing beats the cutoff" (Cbc_C_Interface.h says so).
      if (o.cutoff)
        return without_solution({.reason = TerminationReason::kNoSolutionFound, .limit = Limit::kCutoff,
                                 .detail = cbc_detail(cbc, fmt::format("proved no solution has objective ≤ cutoff {} "
                                                                       "(or the model is infeasible)", *o.cutoff).c_str())},
                                *o.cutoff, nodes);
      return without_solution({.reason = TerminationReason::kInfeasible, .detail = cbc_detail(cbc, "proved the model infeasible")},
                              kInfinity, nodes);
    }
  }
  if (status == kStatusStopped || status == kStatusUserEvent) {
    const bool on_time = secondary == kSecondaryStoppedOnTime || Cbc_isSecondsLimitReached(cbc);
    const Limit limit = on_time ? Limit::kTime : Limit::kOther;
    const std::string detail = cbc_detail(cbc, on_time ? fmt::format("stopped on its time limit ({} s)", o.time_limit_s).c_str()
                                                       : "stopped on a limit of its own");
    if (incumbent)
      return with_solution(model, {.reason = TerminationReason::kFeasible, .limit = limit, .detail = detail},
                           clean(model, incumbent), bound, nodes);
    return without_solution({.reason = TerminationReason::kNoSolutionFound, .limit = limit, .detail = detail}, bound, nodes);
  }
  return fail("solver.cbc", cbc_detail(cbc, incumbent ? "returned a status mist does not know, with a solution"
                                                      : "did not run (an internal error, printed by CBC on stdout)"));
}

Result<SolveResult> solve_locked(const MilpModel& model, const SolveOptions& o) {
  CbcPtr cbc(Cbc_newModel(), &Cbc_deleteModel);
  if (!cbc) return fail("solver.cbc", "Cbc_newModel returned no model");
  load(cbc.get(), model);
  configure(cbc.get(), model, o);
  const SolveClock clock;
  Cbc_solve(cbc.get());
  return read_mip(cbc.get(), model, o, clock.longest_s());
}

}  // namespace

Result<SolveResult> solve_cbc(const MilpModel& model, const SolveOptions& options) {
  std::lock_guard lock(cbc_lock());
  // CBC is C++ under its C API and may throw; nothing escapes this function.
  try {
    return solve_locked(model, options);
  } catch (const CoinError& e) {
    return fail("solver.cbc", fmt::format("CBC raised {}::{}: {}", e.className(), e.methodName(), e.message()));
  } catch (const std::exception& e) {
    return fail("solver.cbc", fmt::format("CBC raised: {}", e.what()));
  } catch (...) {
    return fail("solver.cbc", "CBC raised an unknown exception");
  }
}

}  // namespace mist::solver::detail

#if defined(__SANITIZE_ADDRESS__)
// CBC 2.10.8 itself leaks a few hundred bytes per solve, in CoinUtils' presolve and in Osi's row
// cuts (found by the sanitizer pass of scripts/test.sh). LeakSanitizer reads this hook from any
// program that links mist_solver; only those CBC functions are named, so a leak of mist's own
// (a Cbc_Model never deleted, say) is still reported.
extern "C" __attribute__((used)) const char* __lsan_default_suppressions() {
  return "leak:presolve_dupmajor\n"
         "leak:OsiRowCut::clone\n";
}
#endif
