"""Strict test set-up: float64 on, strict dtype promotion in every test, every annotation of the package checked at
run time (jaxtyping's pytest option in pyproject.toml), several CPU devices, offline Hugging Face, warnings are errors
for our package."""

import importlib.util
import json
import os
import shutil
import tempfile
import types

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Compiling, not computing, is most of the suite's time on a CPU: XLA's CPU backend without LLVM's optimisation
# passes compiles about 1.6x faster (measured: test_discrete + test_options, 174 s -> 110 s on 2 cores). Its results
# agree with the optimised code's to round-off, not bit for bit (some normal draws move by an ulp): every check with
# a tolerance means what it did, comparisons of two runs compare programs compiled alike, and the one test pinned to
# the bits a user's process draws (test_reliability's digests) computes them in a process with XLA's defaults.
# Only where no accelerator plugin is installed (`make gpu-check` tests the optimised GPU programs), and not with
# JAXATTN_TEST_OPTIMISED=1. Subprocesses the tests start get these flags from `QUICK_XLA_FLAGS`.
_accelerator = any(importlib.util.find_spec(p) for p in ("jax_cuda12_plugin", "jax_cuda13_plugin", "libtpu"))
QUICK_XLA_FLAGS = "" if _accelerator or os.environ.get("JAXATTN_TEST_OPTIMISED") else \
    "--xla_backend_optimization_level=0"
os.environ["JAXATTN_TEST_XLA_FLAGS"] = QUICK_XLA_FLAGS
if QUICK_XLA_FLAGS and QUICK_XLA_FLAGS not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + QUICK_XLA_FLAGS).strip()
# several CPU devices for the sharding tests (before jax is imported); subprocesses that must run on
# one device replace XLA_FLAGS with QUICK_XLA_FLAGS (tests/subprocess_env.py)
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()

# One persistent XLA compilation cache per test run, shared by the xdist workers and every process the tests start
# (they inherit the environment): a program compiled once is loaded, not compiled again, by the next process that
# needs it. The folder is made by the first process of the run (the controller, before its workers start) and removed
# at its end, so every run starts cold and nothing of an earlier run (or of another jaxattn/jax) is reused.
# Entries are written without a lock (JAX's LRU cache locks only with a size limit, whose eviction scan makes every
# write O(entries)); a read that met a half-written entry would only warn and compile.
RUN_CACHE = "JAXATTN_TEST_XLA_CACHE"
_made_cache = None
# The compile tier (make test-all's last step) compiles for GPUs that are not here: JAX writes such programs to its
# cache but cannot load them back (a warning each time), and JAX decides once per process whether to use a cache
# (an empty folder: no cache)
if os.environ.get("JAXATTN_COMPILE_TIER"):
    os.environ[RUN_CACHE] = ""
elif not os.environ.get(RUN_CACHE):
    _made_cache = os.environ[RUN_CACHE] = tempfile.mkdtemp(prefix="jaxattn-tests-xla-")
os.environ["JAX_COMPILATION_CACHE_DIR"] = os.environ[RUN_CACHE]  # this run's, whatever the user's setting
os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"  # the tests' programs are small: keep them all
os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "-1"

import jax  # noqa: E402

jax.config.update("jax_compilation_cache_dir", os.environ[RUN_CACHE])  # in case a plugin imported jax first
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_rank_promotion", "raise")

import jaxtyping  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture
def rng():
    return np.random.default_rng(0)


_cache_events: dict[str, int] = {}


def _count_cache_event(name: str, **kwargs) -> None:
    if name.startswith("/jax/compilation_cache/cache_"):
        _cache_events[name.rsplit("/", 1)[-1]] = _cache_events.get(name.rsplit("/", 1)[-1], 0) + 1


jax.monitoring.register_event_listener(_count_cache_event)


def pytest_addoption(parser):
    parser.addoption("--tier-budget", type=float, default=None, metavar="SECONDS",
                     help="fail the run when its tests' durations (set-up, call and tear-down, summed over every test "
                          "and worker) exceed SECONDS: make test holds the fast tier to 600 s on the 2-core machine")
    parser.addoption("--tier-report-only", action="store_true",
                     help="with --tier-budget: report the summed durations against the budget without failing "
                          "(make test-all, on CI's machine)")


_summed = {"seconds": 0.0, "tests": 0}


def pytest_runtest_logreport(report):
    """Sum every phase's duration (in the controller with xdist: the workers' reports arrive there)."""
    _summed["seconds"] += report.duration
    _summed["tests"] += report.when == "call"


def _over_budget(config) -> bool:
    budget = config.getoption("--tier-budget")
    return budget is not None and _summed["seconds"] > budget


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    """Hold the tier to ``--tier-budget``: a test that grows past it fails ``make test`` here, not a reviewer later."""
    if hasattr(session.config, "workerinput") or not _over_budget(session.config):
        return
    if session.exitstatus == pytest.ExitCode.OK and not session.config.getoption("--tier-report-only"):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    budget = config.getoption("--tier-budget")
    if budget is None:
        return
    line = (f"this tier: {_summed['tests']} tests, their durations summed {_summed['seconds']:.0f} s "
            f"(budget {budget:.0f} s)")
    if _over_budget(config):
        line += ": over budget; move the slowest to the slower tier (@pytest.mark.e2e) or make them cheaper"
    terminalreporter.write_line(line, red=_over_budget(config), bold=True)


def pytest_configure(config):
    config.addinivalue_line("markers", "fast_cases(*ids): of a parametrized test, the cases the fast tier runs (the "
                                       "others run in make test-all)")
    config.addinivalue_line("markers", "standard_dtypes(reason): run under JAX's standard dtype promotion instead of "
                                       "the suite's strict one (the test's own code mixes dtypes on purpose)")
    config.addinivalue_line("markers", "unchecked_types(reason): hands values of a kind the annotations do not declare "
                                       "on purpose: a wrong kind, to show the one-line error a user gets, or one the "
                                       "checks convert (NumPy numbers, a tuple for a list); jaxtyping's runtime "
                                       "checker, which would answer first, is off for the test (a user's session has "
                                       "none)")
    config.addinivalue_line("markers", "requires_cpu(reason): needs JAX's CPU backend (the eight devices forced above, "
                                       "the CPU's block width); skipped with the reason on a GPU or TPU")


def cpu_only_skips(items, backend: str) -> None:
    """Skip the tests marked ``requires_cpu`` when JAX's default backend is not the CPU (``make gpu-check``)."""
    if backend == "cpu":
        return
    for item in items:
        m = item.get_closest_marker("requires_cpu")
        if m is not None:
            why = m.args[0] if m.args else "a CPU-only feature"
            item.add_marker(pytest.mark.skip(reason=f"needs the CPU backend ({why}); this is {backend}"))


def fast_cases(items) -> None:
    """A parametrized test marked ``fast_cases(id, ...)`` runs those cases in the fast tier and its other cases in the
    slower one (marked ``e2e`` here, before ``-m`` selects): a property is checked on representative cases by
    ``make test`` and over its whole range by ``make test-all``. An id that names none of the cases collected is an
    error (a renamed parameter would otherwise move every case to the slower tier unnoticed)."""
    cases: dict[tuple, list[str]] = {}
    declared: dict[tuple, tuple[str, ...]] = {}
    for item in items:
        m = item.get_closest_marker("fast_cases")
        if m is None:
            continue
        callspec = getattr(item, "callspec", None)
        if callspec is None:
            raise pytest.UsageError(f"{item.nodeid}: fast_cases marks a test that is not parametrized")
        key = (str(item.path), item.originalname)
        declared[key] = m.args
        cases.setdefault(key, []).append(callspec.id)
        if callspec.id not in m.args:
            item.add_marker(pytest.mark.e2e)
    for key, ids in declared.items():
        unknown = [i for i in ids if i not in cases[key]]
        if unknown and len(cases[key]) > 1:  # one case collected: a single test was asked for by its id
            raise pytest.UsageError(f"{key[0]}::{key[1]}: fast_cases names no case {unknown}; its cases: {cases[key]}")


@pytest.hookimpl(tryfirst=True)  # before -m deselects by the markers added here
def pytest_collection_modifyitems(config, items):
    cpu_only_skips(items, jax.default_backend())
    fast_cases(items)


#: Memory mappings a worker may hold before its compiled programs are dropped (the kernel's limit,
#: /proc/sys/vm/max_map_count, is 65,530 by default).
MAX_MAPPINGS = 30_000


def _mappings() -> int:
    try:
        with open("/proc/self/maps", "rb") as f:
            return sum(1 for _ in f)
    except OSError:  # not Linux: no such limit to watch
        return 0


@pytest.fixture(autouse=True)
def _bounded_mappings():
    """Each program XLA compiles for the CPU keeps about three memory mappings for its code until it is dropped, and
    a worker compiles thousands: past the kernel's limit of mappings per process the next compilation fails inside
    LLVM, which crashed whole xdist workers (a segmentation fault or an abort in ``backend_compile_and_load``, in
    ``executable.serialize()`` of the persistent cache; 8,773 mappings two minutes after a worker started). Dropping
    every compiled program (``jax.clear_caches``) when a worker nears the limit returns them; later tests compile
    what they need again."""
    yield
    if _mappings() > MAX_MAPPINGS:
        import gc

        jax.clear_caches()
        gc.collect()


@pytest.fixture(autouse=True)
def _strict_dtypes(request):
    """Strict dtype promotion in every test (``jax_numpy_dtype_promotion='strict'``): a mixed-precision expression in
    the package is an error here, not a silent upcast. A test whose own code mixes dtypes on purpose (a user's
    function in another precision) is marked ``standard_dtypes`` with the reason."""
    if request.node.get_closest_marker("standard_dtypes") is not None:
        yield
        return
    with jax.numpy_dtype_promotion("strict"):
        yield


def runtime_types(config) -> bool:
    """Whether this run checks the package's annotations at run time (pyproject.toml's addopts)."""
    return bool(config.getoption("--jaxtyping-packages", default=None))


def pytest_report_header(config):
    return "annotations checked at run time: " + (config.getoption("--jaxtyping-packages") if runtime_types(config)
                                                  else "no (--jaxtyping-packages not given)")


@pytest.fixture(autouse=True)
def _unchecked_types(request):
    """jaxtyping's runtime checker off for a test marked ``unchecked_types`` (see the marker), on for every other."""
    if request.node.get_closest_marker("unchecked_types") is None:
        yield
        return
    was = jaxtyping.config.jaxtyping_disable
    jaxtyping.config.update("jaxtyping_disable", True)
    try:
        yield
    finally:
        jaxtyping.config.update("jaxtyping_disable", was)


@pytest.fixture
def gpt_neo_exact(monkeypatch):
    """transformers' GPT-Neo upcasts q and k to float32 even in a float64 model; this makes that
    upcast a float64 one so the HF reference is exact (only the module's own `torch.float32`)."""
    import torch
    from transformers.models.gpt_neo import modeling_gpt_neo as m

    proxy = types.SimpleNamespace(**{k: getattr(torch, k) for k in dir(torch) if not k.startswith("__")})
    proxy.float32 = torch.float64
    monkeypatch.setattr(m, "torch", proxy)


def pytest_unconfigure(config):
    """Each pytest process leaves its cache hits and misses in the run's cache folder; the process that made the
    folder reports them with the entries and removes it."""
    folder = os.environ[RUN_CACHE]
    if os.path.isdir(folder):
        with open(os.path.join(folder, f"hits-{os.getpid()}.json"), "w") as f:
            json.dump(_cache_events, f)
    if _made_cache is None:
        return
    counts = {"cache_hits": 0, "cache_misses": 0}
    for name in os.listdir(_made_cache):
        if name.startswith("hits-"):
            with open(os.path.join(_made_cache, name)) as f:
                for k, v in json.load(f).items():
                    counts[k] = counts.get(k, 0) + v
    entries = sum(1 for name in os.listdir(_made_cache) if name.endswith("-cache"))
    tr = config.pluginmanager.get_plugin("terminalreporter")
    if tr is not None:
        tr.write_line(f"XLA compilation cache of this run: {entries} programs written, {counts['cache_hits']} loaded "
                      f"by the pytest processes instead of compiled ({counts['cache_misses']} compiled)")
    shutil.rmtree(_made_cache, ignore_errors=True)
