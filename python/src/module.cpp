// The Python module strata._strata (pybind11): the runtime, the Session of
// python/src/session.hpp, the data sets, and Strata's errors as Python
// exceptions. The Python package (python/strata/__init__.py) builds the
// friendly API on these.
#include "python/src/session.hpp"

#include "apps/train/setup.hpp"
#include "backends/host_error.hpp"
#include "backends/ranks.hpp"
#include "backends/runtime.hpp"
#include "data/safetensors.hpp"
#include "layers/registry.hpp"
#include "strategies/weights.hpp"

#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <iostream>
#include <limits>
#include <memory>
#include <set>
#include <sstream>
#include <thread>

namespace py = pybind11;

namespace strata::python {
namespace {

// ---------------------------------------------------------------- runtime
// Kokkos starts once per process (its host threads fixed then) and stops at
// interpreter exit, after every live session has let go of its memory.
std::unique_ptr<Runtime>& runtime() {
  static std::unique_ptr<Runtime> r;
  return r;
}
int& runtime_threads() {
  static int t = 0;
  return t;
}

struct SessionHandle;
std::set<SessionHandle*>& live_sessions() {
  static std::set<SessionHandle*> s;
  return s;
}

bool& was_shut_down() {
  static bool done = false;
  return done;
}

void init(int threads) {
  STRATA_REQUIRE(!was_shut_down(), runtime, "strata.shutdown() ended Strata's runtime in this "
                 "process; it starts once per process (Kokkos cannot start again)");
  if (runtime()) {
    STRATA_REQUIRE(threads <= 0 || threads == runtime_threads(), config, "strata.init(threads=",
                   threads, "): Strata already runs with ", runtime_threads(),
                   " host threads (they are set once per process, before the first Trainer)");
    return;
  }
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::string> args{"strata", kokkos_threads_option(threads)};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int argc = static_cast<int>(args.size());
  runtime() = std::make_unique<Runtime>(argc, argv.data());
  runtime_threads() = kokkos_host_threads();
}

void ensure_runtime() {
  if (!runtime()) init(0);
}

// ---------------------------------------------------------------- sessions
struct SessionHandle {
  std::unique_ptr<Session> s;
  explicit SessionHandle(std::unique_ptr<Session> session) : s(std::move(session)) {
    live_sessions().insert(this);
  }
  ~SessionHandle() {
    live_sessions().erase(this);
    py::gil_scoped_release nogil;
    s.reset();
  }
  Session& get() {
    STRATA_REQUIRE(s != nullptr, runtime, "this Trainer was closed (strata.shutdown() or "
                   "interpreter exit)");
    return *s;
  }
};

void shutdown() {
  for (SessionHandle* h : live_sessions()) h->s.reset();
  if (runtime()) was_shut_down() = true;
  runtime().reset();
}

// ---------------------------------------------------------------- arrays
// The caller's array as C-contiguous numbers of one type, checked: a clear
// ValueError (Strata's config error) for anything else, never a crash.
py::array as_array(const py::handle& obj, const char* name) {
  if (py::isinstance<py::array>(obj)) return py::reinterpret_borrow<py::array>(obj);
  if (py::hasattr(obj, "requires_grad") && obj.attr("requires_grad").cast<bool>())
    STRATA_THROW(config, name, ": a tensor that requires grad; pass ", name, ".detach()");
  if (py::hasattr(obj, "is_cuda") && obj.attr("is_cuda").cast<bool>())
    STRATA_THROW(config, name, ": a CUDA tensor; Strata reads host memory: pass ", name, ".cpu()");
  try {  // PyTorch tensors and other array-likes: numpy.asarray (no copy for CPU tensors)
    return py::module_::import("numpy").attr("asarray")(obj).cast<py::array>();
  } catch (py::error_already_set& e) {
    std::string why = e.what();
    why = why.substr(0, why.find('\n'));  // the exception, not its traceback
    STRATA_THROW(config, name, ": not an array (", py::str(obj.get_type()).cast<std::string>(),
                 "): ", why);
  }
}

void require_contiguous(const py::array& a, const char* name) {
  STRATA_REQUIRE(a.flags() & py::array::c_style, config, name,
                 " is not C-contiguous (a transposed or strided view); pass "
                 "numpy.ascontiguousarray(", name, ") or tensor.contiguous()");
}

std::string dtype_name(const py::array& a) { return py::str(a.dtype()).cast<std::string>(); }

// Arrays kept alive for one call, and the batch over them.
struct Arrays {
  py::array x, y;
  std::vector<std::int32_t> labels;  // labels converted from another integer type
  HostBatch batch;
};

Arrays batch_of(const py::handle& xo, const py::handle& yo) {
  Arrays a;
  a.x = as_array(xo, "x");
  // Token ids (a language model's inputs) come as integers: converted once
  // (exact below 2^24, far above any vocabulary).
  if (a.x.dtype().kind() == 'i' || a.x.dtype().kind() == 'u')
    a.x = py::array_t<float, py::array::c_style | py::array::forcecast>(a.x);
  STRATA_REQUIRE(a.x.dtype().is(py::dtype::of<float>()), config, "x: dtype ", dtype_name(a.x),
                 ", Strata trains on float32 (x.astype(numpy.float32) or tensor.float())");
  STRATA_REQUIRE(a.x.ndim() >= 2, config, "x: ", a.x.ndim() == 0 ? std::string("a scalar") :
                 "one dimension (" + std::to_string(a.x.shape(0)) + " values)",
                 "; need (samples, features...): x.reshape(1, -1) for one sample");
  require_contiguous(a.x, "x");
  a.batch.x = static_cast<const float*>(a.x.data());
  a.batch.rows = static_cast<std::size_t>(a.x.shape(0));
  a.batch.features = 1;
  for (py::ssize_t d = 1; d < a.x.ndim(); ++d) a.batch.features *= static_cast<std::size_t>(a.x.shape(d));
  a.y = as_array(yo, "y");
  STRATA_REQUIRE(a.y.ndim() >= 1 && static_cast<std::size_t>(a.y.shape(0)) == a.batch.rows, config,
                 "y: ", a.y.ndim() == 0 ? std::string("a scalar") : std::to_string(a.y.shape(0)) + " samples",
                 ", x has ", a.batch.rows);
  std::size_t width = 1;
  for (py::ssize_t d = 1; d < a.y.ndim(); ++d) width *= static_cast<std::size_t>(a.y.shape(d));
  const char kind = a.y.dtype().kind();
  if (kind == 'i' || kind == 'u') {
    require_contiguous(a.y, "y");
    a.batch.label_width = width;
    if (a.y.dtype().is(py::dtype::of<std::int32_t>())) {
      a.batch.labels = static_cast<const std::int32_t*>(a.y.data());
    } else {  // int64 (PyTorch's labels) and the others: converted, each value checked
      const py::array_t<std::int64_t, py::array::c_style | py::array::forcecast> wide(a.y);
      const std::int64_t* p = wide.data();
      a.labels.resize(static_cast<std::size_t>(wide.size()));
      for (std::size_t i = 0; i < a.labels.size(); ++i) {
        STRATA_REQUIRE(p[i] >= std::numeric_limits<std::int32_t>::min() &&
                           p[i] <= std::numeric_limits<std::int32_t>::max(),
                       config, "y: label ", p[i], " at sample ", i / width, " is out of range");
        a.labels[i] = static_cast<std::int32_t>(p[i]);
      }
      a.batch.labels = a.labels.data();
    }
  } else if (a.y.dtype().is(py::dtype::of<float>())) {
    require_contiguous(a.y, "y");
    a.batch.values = static_cast<const float*>(a.y.data());
    a.batch.value_width = width;
  } else {
    STRATA_THROW(config, "y: dtype ", dtype_name(a.y), ", need integer labels (cross-entropy) or "
                 "float32 targets (MSE)");
  }
  return a;
}

template <class T>
py::array_t<T> numpy_of(const std::vector<T>& v, std::vector<py::ssize_t> shape) {
  py::array_t<T> out(shape);
  std::memcpy(out.mutable_data(), v.data(), v.size() * sizeof(T));
  return out;
}

py::dict dataset_dict(const data::Dataset& d, const std::string& prefix, py::dict out) {
  const auto n = static_cast<py::ssize_t>(d.size());
  std::vector<py::ssize_t> xs{n};
  if (d.shape.empty()) xs.push_back(static_cast<py::ssize_t>(d.features));
  for (std::size_t s : d.shape) xs.push_back(static_cast<py::ssize_t>(s));
  out[(prefix + "_x").c_str()] = numpy_of(d.x, xs);
  if (d.is_classification()) {
    std::vector<py::ssize_t> ys{n};
    if (d.label_width > 1) ys.push_back(static_cast<py::ssize_t>(d.label_width));
    out[(prefix + "_y").c_str()] = numpy_of(d.labels, ys);
  } else {
    out[(prefix + "_y").c_str()] = numpy_of(d.targets, {n, static_cast<py::ssize_t>(d.target_width)});
  }
  return out;
}

// accuracy: None for a regression (MSE) model.
py::dict evaluation_dict(const Evaluation& e, bool classification) {
  py::dict d;
  d["loss"] = e.loss;
  d["accuracy"] = classification ? py::cast(e.accuracy) : py::none();
  d["samples"] = e.samples;
  return d;
}

// ---------------------------------------------------------------- errors
PyObject* error_base = nullptr;
PyObject* config_error = nullptr;
PyObject* data_error = nullptr;
PyObject* runtime_failure = nullptr;

PyObject* make_exception(py::module_& m, const char* name, PyObject* bases, const char* doc) {
  const std::string full = std::string("strata._strata.") + name;
  PyObject* e = PyErr_NewExceptionWithDoc(full.c_str(), doc, bases, nullptr);
  if (e == nullptr) throw py::error_already_set();
  m.add_object(name, py::handle(e));
  return e;
}

}  // namespace
}  // namespace strata::python

PYBIND11_MODULE(_strata, m) {
  using namespace strata;
  using namespace strata::python;
  m.doc() = "Strata's native module (the strata package wraps it)";

  error_base = make_exception(m, "Error", PyExc_Exception, "A Strata error (its message names what was wrong).");
  config_error = make_exception(m, "ConfigError", py::make_tuple(py::handle(error_base), py::handle(PyExc_ValueError)).release().ptr(),
                                "Bad options, shapes or arrays (strata-train's exit code 2).");
  data_error = make_exception(m, "DataError", py::make_tuple(py::handle(error_base), py::handle(PyExc_OSError)).release().ptr(),
                              "Missing, truncated or corrupt files (exit code 3).");
  runtime_failure = make_exception(m, "RuntimeFailure", py::make_tuple(py::handle(error_base), py::handle(PyExc_RuntimeError)).release().ptr(),
                                   "A numerical failure or a failure of the runtime: device, communication (exit code 4).");
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      PyObject* type = e.kind() == ErrorKind::config ? config_error
                       : e.kind() == ErrorKind::data ? data_error
                                                     : runtime_failure;
      PyErr_SetString(type, e.message().c_str());
    }
  });

  m.def("init", &init, py::arg("threads") = 0,
        "Starts Strata's runtime with this many host threads (0: every core). Optional: the first "
        "Trainer starts it. Once per process.");
  m.def("shutdown", &shutdown, "Closes every Trainer and stops the runtime (at interpreter exit).");
  m.def("threads", [] { return runtime() ? runtime_threads() : 0; },
        "The host threads the runtime runs with (0 before it started).");
  m.def("build_info", [] {
    ensure_runtime();
    return build_info();
  });
  m.def("train_help", [] {
    // strata-train's --help, which names every option (the Python layer maps
    // keywords and booleans to them).
    std::ostringstream out;
    std::streambuf* old = std::cout.rdbuf(out.rdbuf());
    try {
      app::parse_train_args({"--help"});
    } catch (...) {
      std::cout.rdbuf(old);
      throw;
    }
    std::cout.rdbuf(old);
    return out.str();
  });
  m.def("describe_model", [](const std::vector<std::string>& args) {
    ensure_runtime();  // the layer table builds the model
    std::optional<app::TrainConfig> c = app::parse_train_args(args);
    STRATA_REQUIRE(c.has_value(), config, "no model in the options given");
    std::ostringstream out;
    app::describe_model(*c, out);
    return out.str();
  });
  m.def("model_parameters", [](const std::vector<std::string>& args) {
    ensure_runtime();
    std::optional<app::TrainConfig> c = app::parse_train_args(args);
    STRATA_REQUIRE(c.has_value(), config, "no model in the options given");
    const auto model = build_model<float>(app::model_spec(*c), c->seed);
    py::list out;
    for (const ParamInfo& p : model.parameters()) {
      py::tuple shape(p.shape.rank());
      for (std::size_t i = 0; i < p.shape.rank(); ++i) shape[i] = p.shape[i];
      out.append(py::make_tuple(p.name, shape));
    }
    return out;
  });
  m.def("load_dataset", [](const std::vector<std::string>& args) {
    ensure_runtime();
    data::Split s;
    {
      py::gil_scoped_release nogil;
      s = load_dataset(args);
    }
    py::dict out;
    dataset_dict(s.train, "train", out);
    dataset_dict(s.test, "test", out);
    out["classes"] = s.train.classes;
    out["name"] = s.train.name;
    return out;
  });

  py::class_<SessionHandle>(m, "Session")
      .def(py::init([](const std::vector<std::string>& args) {
             ensure_runtime();
             std::unique_ptr<Session> s;
             {
               py::gil_scoped_release nogil;
               s = std::make_unique<Session>(args);
             }
             return std::make_unique<SessionHandle>(std::move(s));
           }),
           py::arg("args"))
      .def("describe", [](SessionHandle& h) { return h.get().describe(); })
      .def_property_readonly("num_params", [](SessionHandle& h) { return h.get().num_params(); })
      .def_property_readonly("ranks", [](SessionHandle& h) { return h.get().ranks(); })
      .def_property_readonly("rank", [](SessionHandle& h) { return h.get().rank(); })
      .def_property_readonly("steps", [](SessionHandle& h) { return h.get().steps(); })
      .def_property_readonly("features", [](SessionHandle& h) { return h.get().features(); })
      .def_property_readonly("classes", [](SessionHandle& h) { return h.get().classes(); })
      .def("step", [](SessionHandle& h, const py::handle& x, const py::handle& y) {
             Session& s = h.get();
             Arrays a = batch_of(x, y);
             py::gil_scoped_release nogil;
             return s.step(a.batch);
           }, py::arg("x"), py::arg("y"))
      .def("evaluate", [](SessionHandle& h, const py::handle& x, const py::handle& y) {
             Session& s = h.get();
             Arrays a = batch_of(x, y);
             Evaluation e;
             {
               py::gil_scoped_release nogil;
               e = s.evaluate(a.batch);
             }
             return evaluation_dict(e, s.classes() > 0);
           }, py::arg("x"), py::arg("y"))
      .def("fit", [](SessionHandle& h, std::size_t epochs, std::size_t steps, py::object on_step,
                     py::object on_evaluation) {
             Session& s = h.get();
             s.set_length(epochs, steps);
             FitHooks hooks;
             // Called on the thread that called fit() (rank 0), the GIL taken again.
             if (!on_step.is_none())
               hooks.on_step = [&](const StepStats& st) {
                 py::gil_scoped_acquire gil;
                 py::dict d;
                 d["step"] = st.step;
                 d["epoch"] = st.epoch + 1;
                 d["total"] = st.total;
                 d["loss"] = st.loss;
                 d["lr"] = st.lr;
                 d["samples_per_sec"] = st.samples_per_sec;
                 d["elapsed_s"] = st.elapsed_s;
                 on_step(d);
               };
             if (!on_evaluation.is_none())
               hooks.on_evaluation = [&](const EvalStats& ev) {
                 py::gil_scoped_acquire gil;
                 py::dict d = evaluation_dict(ev.result, ev.classification);
                 d["step"] = ev.step;
                 d["epoch"] = ev.epoch + 1;
                 d["when"] = ev.when;
                 on_evaluation(d);
               };
             TrainResult r;
             {
               py::gil_scoped_release nogil;
               r = s.fit(hooks);
             }
             py::dict d;
             d["steps"] = r.steps;
             d["final_loss"] = r.trained ? py::cast(r.last_loss) : py::none();
             d["samples_per_sec"] = r.timed ? py::cast(r.samples_per_sec) : py::none();
             d["test_loss"] = r.eval.samples > 0 ? py::cast(r.eval.loss) : py::none();
             d["test_accuracy"] = r.eval.samples > 0 && s.classes() > 0 ? py::cast(r.eval.accuracy) : py::none();
             d["checkpoint"] = r.checkpoint;
             return d;
           }, py::arg("epochs") = 0, py::arg("steps") = 0, py::arg("on_step") = py::none(),
           py::arg("on_evaluation") = py::none())
      .def("save", [](SessionHandle& h, const std::string& dir) {
             Session& s = h.get();
             py::gil_scoped_release nogil;
             return s.save(dir);
           })
      .def("load", [](SessionHandle& h, const std::string& file) {
             Session& s = h.get();
             py::gil_scoped_release nogil;
             s.load(file);
           })
      .def("state_dict", [](SessionHandle& h) {
             Session& s = h.get();
             Weights w;
             {
               py::gil_scoped_release nogil;
               w = s.weights();
             }
             const safetensors::File f = export_weights(s.table(), w, safetensors::DType::F32);
             py::dict out;
             for (const safetensors::Tensor& t : f.tensors) {
               std::vector<py::ssize_t> shape(t.shape.begin(), t.shape.end());
               if (t.dtype == safetensors::DType::I64) {
                 py::array_t<std::int64_t> a(shape);
                 std::memcpy(a.mutable_data(), t.bytes.data(), t.bytes.size());
                 out[t.name.c_str()] = a;
               } else {
                 out[t.name.c_str()] = numpy_of(t.to_float(), shape);
               }
             }
             return out;
           })
      .def("load_state_dict", [](SessionHandle& h, const py::dict& d, bool strict) {
             Session& s = h.get();
             safetensors::File f;
             for (const auto& [key, value] : d) {
               const std::string name = py::str(key).cast<std::string>();
               py::array a = as_array(value, name.c_str());
               std::vector<std::uint64_t> shape;
               for (py::ssize_t i = 0; i < a.ndim(); ++i) shape.push_back(static_cast<std::uint64_t>(a.shape(i)));
               const char kind = a.dtype().kind();
               if (kind == 'i' || kind == 'u') {
                 const py::array_t<std::int64_t, py::array::c_style | py::array::forcecast> v(a);
                 safetensors::Tensor t;
                 t.name = name;
                 t.dtype = safetensors::DType::I64;
                 t.shape = shape;
                 t.bytes.assign(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(std::int64_t));
                 f.tensors.push_back(std::move(t));
               } else {
                 STRATA_REQUIRE(kind == 'f', config, name, ": dtype ", dtype_name(a),
                                ", need floating point");
                 const py::array_t<float, py::array::c_style | py::array::forcecast> v(a);
                 f.tensors.push_back(safetensors::make_tensor(name, shape, v.data(), safetensors::DType::F32));
               }
             }
             ImportReport r;
             {
               py::gil_scoped_release nogil;
               Weights w = s.weights();
               try {
                 r = import_weights(f, "state_dict", s.table(), w, strict, "strict=False");
               } catch (const Error& e) {  // a dict argument, not a file: a ValueError
                 std::string m = e.message();
                 const std::string file = "safetensors file 'state_dict'";
                 if (m.rfind(file, 0) == 0) m = "the state_dict given" + m.substr(file.size());
                 for (std::size_t at = m.find(": file ["); at != std::string::npos; at = m.find(": file [", at))
                   m.replace(at, 8, ": given [");
                 throw Error(ErrorKind::config, m);
               }
               s.set_weights(w);
             }
             // As PyTorch's load_state_dict reports it.
             py::dict out;
             auto names = [](const std::vector<std::string>& v) {  // "2.bias [10]" -> "2.bias"
               std::vector<std::string> n;
               for (const std::string& s : v) n.push_back(s.substr(0, s.find(" [")));
               return n;
             };
             out["missing_keys"] = names(r.missing);
             out["unexpected_keys"] = names(r.unexpected);
             out["mismatched"] = r.mismatched;
             out["loaded"] = r.loaded;
             return out;
           }, py::arg("state_dict"), py::arg("strict") = true);
}
