// `import mist`: predict, tune and gpus from Python (docs/python.md). The inputs are what the
// command takes (a catalog name, a path to a JSON file) or Python dicts, read by the same parsers
// (src/api); the results are the dicts `--json` prints; errors raise mist.Error naming the field.
// The bindings only convert: every rule and every JSON field lives in src/api.
#include <pybind11/eval.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <vector>

#include "api/gpus.hpp"
#include "api/inputs.hpp"
#include "api/prediction_json.hpp"
#include "api/tune.hpp"

namespace py = pybind11;

namespace mist::python {

namespace {

// mist.Error, created at import and kept for the life of the interpreter.
PyObject* g_error = nullptr;

constexpr int kMaxDepth = 200;  // nesting of a dict given as an input (a cycle ends here too)

std::string type_name(py::handle h) { return py::str(py::type::handle_of(h).attr("__name__")); }

[[noreturn]] void raise(const api::Failure& f) {
  if (f.kind == api::Failure::Kind::kInternal) throw std::runtime_error(f.message());
  py::object e = py::reinterpret_borrow<py::object>(g_error)(f.message(), f.error.path, f.error.message);
  PyErr_SetObject(g_error, e.ptr());
  throw py::error_already_set();
}

// A Python value as the JSON the command would have parsed from a file: dicts (str keys), lists
// and tuples, str, int, float, bool and None. Anything else is a TypeError naming where it is.
Json to_json(py::handle h, const std::string& path, int depth) {
  if (depth > kMaxDepth) throw py::value_error(path + ": nested more than " + std::to_string(kMaxDepth) + " levels deep");
  PyObject* o = h.ptr();
  if (h.is_none()) return nullptr;
  if (PyBool_Check(o)) return o == Py_True;
  if (PyFloat_Check(o)) return PyFloat_AsDouble(o);
  if (PyLong_Check(o) || (!PyUnicode_Check(o) && PyIndex_Check(o))) {  // int, numpy integers
    py::int_ i = py::reinterpret_steal<py::int_>(PyNumber_Index(o));
    if (!i) throw py::error_already_set();
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
    if (overflow == 0) return static_cast<int64_t>(v);
    if (overflow > 0) {
      const unsigned long long u = PyLong_AsUnsignedLongLong(i.ptr());
      if (!PyErr_Occurred()) return static_cast<uint64_t>(u);
      PyErr_Clear();
    }
    // Beyond 64 bits: a double, as the JSON parser reads such a number in a file.
    const double d = PyLong_AsDouble(i.ptr());
    if (d == -1.0 && PyErr_Occurred()) {
      PyErr_Clear();
      throw py::value_error(path + ": the integer is beyond the range of a double");
    }
    return d;
  }
  if (PyUnicode_Check(o)) return h.cast<std::string>();
  if (PyList_Check(o) || PyTuple_Check(o)) {
    Json a = Json::array();
    size_t i = 0;
    for (py::handle item : h) a.push_back(to_json(item, path + "[" + std::to_string(i++) + "]", depth + 1));
    return a;
  }
  // Kept for the life of the interpreter (a static py::object would be released after it ends).
  static PyObject* const mapping = py::object(py::module_::import("collections.abc").attr("Mapping")).release().ptr();
  if (PyDict_Check(o) || py::isinstance(h, py::handle(mapping))) {
    Json j = Json::object();
    for (py::handle key : h) {
      if (!PyUnicode_Check(key.ptr()))
        throw py::type_error(path + ": keys must be str, got " + type_name(key) + " " + std::string(py::repr(key)));
      const std::string k = key.cast<std::string>();
      j[k] = to_json(h[key], path + "." + k, depth + 1);
    }
    return j;
  }
  throw py::type_error(path + ": " + type_name(h) +
                       " is not JSON: give a dict, a list, a str, a number, a bool or None");
}

// A path argument: str or os.PathLike.
std::optional<std::string> as_path(py::handle h) {
  if (py::isinstance<py::str>(h)) return h.cast<std::string>();
  if (py::hasattr(h, "__fspath__")) return py::str(py::module_::import("os").attr("fsdecode")(h)).cast<std::string>();
  return std::nullopt;
}

// An input: a catalog name (the model) or a path (str or os.PathLike), else JSON (a dict).
api::Input input(py::handle h, const char* what, bool catalog) {
  const std::string forms = catalog ? "a catalog name, a path to a JSON file or a dict"
                                    : "a path to a JSON file or a dict";
  if (h.is_none()) throw py::type_error(std::string(what) + ": required: " + forms);
  if (auto path = as_path(h)) return {*path, {}, what};
  if (PyBytes_Check(h.ptr())) throw py::type_error(std::string(what) + ": give " + forms + ", not bytes");
  return {"", to_json(h, what, 0)};
}

std::string path_option(py::handle h, const char* what) {
  if (h.is_none()) return "";
  if (auto path = as_path(h)) return *path;
  throw py::type_error(std::string(what) + ": a path (str or os.PathLike) or None, got " + type_name(h));
}

std::string string_option(py::handle h, const char* what) {
  if (h.is_none()) return "";
  if (py::isinstance<py::str>(h)) return h.cast<std::string>();
  throw py::type_error(std::string(what) + ": a str or None, got " + type_name(h));
}

// A list option as the command line's comma-separated text: "1,2,4" or [1, 2, 4].
std::string list_option(py::handle h, const char* what, bool of_strings) {
  if (h.is_none()) return "";
  if (py::isinstance<py::str>(h)) return h.cast<std::string>();
  if (!py::isinstance<py::iterable>(h))
    throw py::type_error(std::string(what) + ": a list or a comma-separated str, got " + type_name(h));
  std::string out;
  for (py::handle item : h) {
    if (!out.empty()) out += ",";
    if (of_strings && py::isinstance<py::str>(item))
      out += item.cast<std::string>();
    else if (!of_strings && !PyBool_Check(item.ptr()) && PyIndex_Check(item.ptr()))
      out += std::string(py::str(py::reinterpret_steal<py::object>(PyNumber_Index(item.ptr()))));
    else
      throw py::type_error(std::string(what) + ": items must be " + (of_strings ? "str" : "int") + ", got " +
                           type_name(item));
  }
  return out;
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    out.push_back(text.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

py::object to_python(const Json& j) { return py::module_::import("json").attr("loads")(j.dump()); }

py::object predict(py::object model, py::object cluster, py::object training, py::object plan,
                   const std::string& engine, bool uncalibrated) {
  const api::JobInputs in{.model = input(model, "model", true),
                          .cluster = input(cluster, "cluster", false),
                          .training = input(training, "training", false),
                          .plan = input(plan, "plan", false)};
  const api::Calibration calibration{.engine = engine, .uncalibrated = uncalibrated, .headroom = 0};
  std::optional<api::Failure> failure;
  Json out;
  {
    py::gil_scoped_release nogil;
    auto job = api::load_job(in);
    auto pred = job ? api::predict(*job, calibration) : Result<analysis::Prediction>(std::unexpected(job.error()));
    if (pred)
      out = api::prediction_json(*job, *pred);
    else
      failure = api::Failure(pred.error());
  }
  if (failure) raise(*failure);
  return to_python(out);
}

py::object tune(py::object model, py::object cluster, py::object training, py::object engine, py::object space,
                int top, bool no_offload, py::object virtual_stages, py::object solver, double milp_time_limit,
                bool exhaustive, bool no_rerank, py::object compare_to, py::object compare_megatron_flags,
                bool job_from_flags, bool no_engines, bool uncalibrated, double headroom) {
  api::JobInputs in{.model = input(model, "model", true),
                    .cluster = input(cluster, "cluster", false),
                    .training = input(training, "training", false),
                    .plan = std::nullopt};
  api::TuneRequest r;
  r.engine = string_option(engine, "engine");
  if (!space.is_none()) r.space = string_option(space, "space");
  r.top = top;
  r.no_offload = no_offload;
  r.virtual_stages = list_option(virtual_stages, "virtual_stages", false);
  if (!solver.is_none()) r.solver = string_option(solver, "solver");
  r.milp_time_limit = milp_time_limit;
  r.exhaustive = exhaustive;
  r.no_rerank = no_rerank;
  r.compare_to = string_option(compare_to, "compare_to");
  r.compare_megatron_flags = string_option(compare_megatron_flags, "compare_megatron_flags");
  r.job_from_flags = job_from_flags;
  r.no_engines = no_engines;
  r.calibration.uncalibrated = uncalibrated;
  r.calibration.headroom = headroom;
  std::optional<api::Failure> failure;
  Json out;
  {
    py::gil_scoped_release nogil;
    auto job = api::load_job(in);
    auto run = job ? api::tune(std::move(*job), r) : api::Outcome<api::TuneRun>(std::unexpected(job.error()));
    if (run)
      out = api::tune_json(*run);
    else
      failure = run.error();
  }
  if (failure) raise(*failure);
  return to_python(out);
}

py::object gpus(py::object model, py::object training, py::object candidates, py::object counts, double tokens,
                py::object prices, py::object space, py::object engine, py::object gpus_per_node, int threads,
                bool fast, py::object profile_db, bool uncalibrated, double headroom) {
  const api::Input model_in = input(model, "model", true), training_in = input(training, "training", false);
  api::GpusRequest r;
  if (candidates.is_none()) throw py::type_error("candidates: required: GPU types, e.g. [\"H100-SXM5-80GB\"]");
  r.candidates = split(list_option(candidates, "candidates", true));
  if (!counts.is_none()) {
    r.counts.clear();
    if (!PyBool_Check(counts.ptr()) && PyIndex_Check(counts.ptr())) {
      r.counts.push_back(counts.cast<int64_t>());
    } else {
      const std::string text = list_option(counts, "counts", false);
      for (const auto& c : split(text)) {
        try {
          size_t end = 0;
          r.counts.push_back(std::stoll(c, &end));
          if (end != c.size()) throw std::invalid_argument(c);
        } catch (const std::exception&) {
          throw py::type_error("counts: GPU counts, a list of int or a comma-separated str; got \"" + text + "\"");
        }
      }
    }
  }
  r.tokens = tokens;
  r.prices = path_option(prices, "prices");
  if (!space.is_none()) r.space = string_option(space, "space");
  r.engine = string_option(engine, "engine");
  if (!gpus_per_node.is_none()) r.gpus_per_node = gpus_per_node.cast<int64_t>();
  r.threads = threads;
  r.fast = fast;
  r.profile_db = path_option(profile_db, "profile_db");
  r.calibration.uncalibrated = uncalibrated;
  r.calibration.headroom = headroom;
  std::optional<api::Failure> failure;
  Json out;
  {
    py::gil_scoped_release nogil;
    auto m = api::load_model(model_in);
    auto t = m ? api::load_training(training_in) : Result<spec::TrainingSpec>(std::unexpected(m.error()));
    auto cmp = t ? api::gpus(*m, *t, r) : api::Outcome<advisor::Comparison>(std::unexpected(t.error()));
    if (cmp)
      out = api::gpus_json(*m, r, *cmp);
    else
      failure = cmp.error();
  }
  if (failure) raise(*failure);
  return to_python(out);
}

const char* kErrorClass = R"(
class Error(ValueError):
    """Invalid input to mist: str() is the message the command line prints after "mist: ".

    field: the path of the field or option at fault ("training.seq_length", "plan.stages[0].zero",
           "--engine"), or "" when no single field is;
    reason: what is wrong with it.
    """

    def __init__(self, message, field="", reason=""):
        super().__init__(message)
        self.field = field
        self.reason = reason
)";

}  // namespace

}  // namespace mist::python

PYBIND11_MODULE(mist, m) {
  using namespace mist::python;
  namespace api = mist::api;
  m.doc() = "mist: memory, time and plans of distributed LLM training (docs/python.md). predict, tune and gpus "
            "take what the command takes (catalog names, JSON files) or dicts and return what --json prints.";
  m.attr("__version__") = MIST_VERSION;

  py::dict ns;
  ns["__name__"] = "mist";
  ns["__builtins__"] = py::module_::import("builtins");
  py::exec(kErrorClass, ns);
  py::object error = ns["Error"];
  m.attr("Error") = error;
  g_error = error.inc_ref().ptr();  // never released: the class lives as long as the interpreter

  m.def("predict", &predict, py::arg("model"), py::arg("cluster"), py::arg("training"), py::arg("plan"),
        py::arg("engine") = "megatron", py::arg("uncalibrated") = false,
        R"(Memory of every stage, iteration time and throughput of one plan: the dict `mist predict --json` prints.

model: a catalog name (mist list models), a path to a Hugging Face config.json or mist's model form, or a dict of either;
cluster, training, plan: a path to a JSON file or a dict (docs/specs.md, docs/plan-format.md);
engine: the software stack whose calibration the time model uses (megatron, deepspeed, torchtitan);
uncalibrated: the physics alone.
Raises mist.Error (a ValueError) naming the field at fault.)");

  m.def("tune", &tune, py::arg("model"), py::arg("cluster"), py::arg("training"),
        py::arg("engine") = py::none(), py::kw_only(), py::arg("space") = "mist", py::arg("top") = 5, py::arg("no_offload") = false,
        py::arg("virtual_stages") = py::none(), py::arg("solver") = "dp", py::arg("milp_time_limit") = 10.0,
        py::arg("exhaustive") = false, py::arg("no_rerank") = false, py::arg("compare_to") = py::none(),
        py::arg("compare_megatron_flags") = py::none(), py::arg("job_from_flags") = false,
        py::arg("no_engines") = false, py::arg("uncalibrated") = false, py::arg("headroom") = mist::analysis::kMemoryBand,
        R"(The fastest plan that fits: the dict `mist tune --json` prints ({"plan", "prediction", "alternatives", ...},
or {"fits": False, "closest", "gpus_to_fit", ...} when no plan fits).

The inputs are those of predict, without a plan. The options are the command's (docs/cli.md):
engine (only plans that engine runs, with its calibration), space (mist, megatron, deepspeed), top,
no_offload, virtual_stages ([1, 2, 4] or "1,2,4"), solver (dp, milp), milp_time_limit, exhaustive,
no_rerank, compare_to (Megatron-LM flags, or a DeepSpeed JSON file), compare_megatron_flags,
job_from_flags (tune the job compare_to's flags state, not the training file's), no_engines (skip each
engine's own search), uncalibrated, headroom (share of GPU memory left free).
Raises mist.Error naming the field or option at fault.)");

  m.def("gpus", &gpus, py::arg("model"), py::arg("training"), py::arg("candidates"), py::kw_only(),
        py::arg("counts") = py::none(), py::arg("tokens") = 1e12, py::arg("prices") = py::none(),
        py::arg("space") = "mist", py::arg("engine") = py::none(), py::arg("gpus_per_node") = py::none(),
        py::arg("threads") = 2, py::arg("fast") = false, py::arg("profile_db") = py::none(),
        py::arg("uncalibrated") = false, py::arg("headroom") = mist::analysis::kMemoryBand,
        R"(Which GPU type and how many: the dict `mist gpus --json` prints ({"rows", "smallest_fitting", ...}).

model, training: as for predict; candidates: GPU types (["H100-SXM5-80GB", "A100-SXM4-80GB"] or a
comma-separated str); counts: GPU counts to try (the command's --gpus; default [8, 16, 64]);
tokens: the training budget; prices: a prices JSON file; space, engine, gpus_per_node, threads,
fast, profile_db, uncalibrated, headroom: the command's options (docs/gpus.md).
A job that fits nowhere is no error: every row says what it lacks.
Raises mist.Error naming the field or option at fault.)");
}
