"""Test setup: float64 available for oracles, interpreter address checks, Hypothesis profile, GPU-only marker,
pytest-xdist scheduling."""

import collections
import os

import jax
import pytest

import workbench  # noqa: F401  (first: decides compiled vs interpreted Triton)
from workbench import launch
from workbench.strategies import load_profile

jax.config.update("jax_enable_x64", True)
# On a machine of several GPUs, WORKBENCH_SPREAD_GPUS=<count> gives each pytest-xdist worker one of them (gw0 the
# first, gw1 the second, …), set before JAX starts its GPU backend: the workers then compile and run side by side
# instead of sharing one GPU's memory. Tests that need several GPUs (ring, sharding) run without it.
if os.environ.get("WORKBENCH_SPREAD_GPUS") and os.environ.get("PYTEST_XDIST_WORKER", "").startswith("gw"):
    os.environ["CUDA_VISIBLE_DEVICES"] = str(int(os.environ["PYTEST_XDIST_WORKER"][2:])
                                             % int(os.environ["WORKBENCH_SPREAD_GPUS"]))
# Every interpreted kernel's loads and stores are checked against its buffers (an out-of-bounds address
# fails with the kernel's name and offsets instead of reading this process's memory); inherited by the
# notebooks' kernels under nbmake. WORKBENCH_CHECK_BOUNDS=0 turns it off.
os.environ.setdefault(launch.CHECK_BOUNDS_VARIABLE, "1")
PROFILE = load_profile()
if launch.INTERPRET:
    # The CPU suite compiles thousands of small XLA programs (references, float64 oracles, the glue around
    # the interpreted kernels): at these sizes LLVM's optimisation passes are most of the compile time and
    # buy nothing (the kda tests ran 174 → 121 s). Read when JAX first starts its CPU backend, which no
    # import above does; inherited by the notebooks' kernels and the multi-process workers.
    os.environ["XLA_FLAGS"] = " ".join(
        [os.environ.get("XLA_FLAGS", ""), "--xla_backend_optimization_level=0",
         "--xla_llvm_disable_expensive_passes=true"]).strip()


def pytest_report_header(config):
    mode = "interpreter (CPU)" if launch.INTERPRET else "compiled (CUDA)"
    checks = ", address checks on" if launch.INTERPRET and launch.check_bounds_enabled() else ""
    return f"workbench: Triton {mode}{checks}; hypothesis profile {PROFILE}; jax {jax.__version__}"


def pytest_collection_modifyitems(config, items):
    if launch.INTERPRET:
        skip = pytest.mark.skip(reason="needs a CUDA GPU: Triton runs in the interpreter on this machine")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


# Modules whose tests share one expensive result cached per process, so that under pytest-xdist all of
# their tests must run on one worker: test_ring.py runs every case in one 8-device subprocess,
# test_multiprocess.py one pair of jax.distributed processes, test_bounds.py one worker process that
# compiles each op once, test_sharding.py every op on 4 host devices in one subprocess.
SAME_WORKER = ("tests/ring_attention/test_ring.py", "tests/ring_attention/test_multiprocess.py",
               "tests/test_bounds.py", "tests/test_sharding.py")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadgroup`: every test is its own unit of work, handed to whichever worker is free, except
    that each module in SAME_WORKER is one unit (xdist sends the units with the most tests first, so
    it starts at once). xdist's own loadgroup reads `xdist_group` marks from node ids that it rewrites
    through `item._nodeid`, which pytest 9.2 ignores: marked tests would be spread over the workers."""
    if config.getvalue("dist") != "loadgroup":
        return None
    missing = [path for path in SAME_WORKER if not (config.rootpath / path).is_file()]
    if missing:
        raise pytest.UsageError(f"tests/conftest.py SAME_WORKER names missing modules: {missing}")
    from xdist.scheduler import LoadGroupScheduling

    class ModuleGroups(LoadGroupScheduling):
        def _split_scope(self, nodeid):
            path = nodeid.split("::", 1)[0]
            return path if path in SAME_WORKER else super()._split_scope(nodeid)

    return ModuleGroups(config, log)


@pytest.fixture(scope="module")
def ieee_float32():
    """Full float32 matmuls in every JAX computation (no TF32/bf16 passes), as a float64 oracle
    comparison assumes; property modules use it with `pytestmark = pytest.mark.usefixtures(...)`."""
    with jax.default_matmul_precision("float32"):
        yield


@pytest.fixture
def tuning_table_configs(tmp_path, monkeypatch):
    """Each autotuned kernel on the config a user's call gets by default: WORKBENCH_AUTOTUNE=table with an empty
    cache, so the tuning table answers (the GPU tests otherwise run each kernel's first config, `off`). Returns a
    check, called after the launches, that returns {kernel: how its configs were found} for the launches since
    and, on a GPU kind with a table (its own or a sibling's), asserts that the table answered each and nothing
    was timed; elsewhere the launches were tuned, and the sources returned say so."""
    from workbench import autotune, cache, tuning_table

    monkeypatch.setenv(cache.MODE_VAR, "table")
    monkeypatch.setenv(cache.CACHE_VAR, str(tmp_path / "cache"))
    before, chosen = collections.Counter(autotune.STATS), set(autotune.CHOSEN)

    def check():
        counts = autotune.STATS - before
        sources = collections.defaultdict(set)
        for name, entry in autotune.CHOSEN.items():
            if name not in chosen:
                sources[entry["kernel"]].add(entry["source"])
        assert counts["chosen_first"] == 0 and counts["fallback"] == 0, dict(counts)
        assert sources, f"no autotuned launch chose a config in this test (a program traced earlier?): {dict(counts)}"
        device = jax.devices()[0].device_kind
        kinds = [kind for kind in (device, tuning_table.SIBLINGS.get(device)) if kind]
        if any(tuning_table.device_file(kind).is_file() for kind in kinds):
            others = {kernel: found for kernel, found in sources.items()
                      if any(s != "only" and not s.startswith("table") for s in found)}
            assert counts["chosen_tuned"] == 0 and not others, f"not from the table: {others}; {dict(counts)}"
        return dict(sources)

    return check
