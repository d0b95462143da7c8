"""workbench.autotune on a CPU: keys, the store (corrupt files, unwritable folders, two writers), the choice
with a stub timer, the launcher's GPU branch with a stub launcher, the tuning table. The real thing (a GPU)
is exercised by the GPU tests and `workbench bench --first-call`; the compiled-kernel cache by
tests/test_gpu_call.py."""

import collections
import json
import math
import os
import re
import subprocess
import sys
import textwrap
import time
import types
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton

from workbench import _bounds, autotune, cache, device_time, launch
from workbench.recurrent import kernels as recurrent_kernels

CACHE_PY = Path(cache.__file__)  # standard library only: loaded alone by the writer processes


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv(autotune.CACHE_VAR, str(folder))
    monkeypatch.setenv(autotune.TABLE_VAR, str(tmp_path / "no-table"))  # the default mode, no table entries
    monkeypatch.delenv(autotune.MODE_VAR, raising=False)
    monkeypatch.setattr(autotune, "_WARNED", set())
    monkeypatch.setattr(autotune, "_CHOICES", {})
    monkeypatch.setattr(autotune, "STATS", autotune.collections.Counter())
    monkeypatch.setattr(autotune, "CHOSEN", {})
    return folder


def _configs(n=3):
    return [triton.Config({"BV": 16 * 2 ** i}, num_warps=4, num_stages=2) for i in range(n)]


def _key(**changes):
    fields = dict(kernel="k", source="abc", candidates=_configs(),
                  key_values={"H": 2, "K": {"shape": [4], "dtype": "f"}},
                  arrays=[["q", "bfloat16", "given"]], device="NVIDIA H100",
                  versions={"triton": "3.9.0"})
    return autotune.tuning_key(**{**fields, **changes})


class Timer:
    """A stub timer: ms per config from `times` (by BV), counting calls."""

    def __init__(self, times):
        self.times, self.calls = times, []

    def __call__(self, config):
        self.calls.append(config.kwargs["BV"])
        result = self.times[config.kwargs["BV"]]
        if isinstance(result, Exception):
            raise result
        return result


# ----------------------------------------------------------------------------- environment


def test_mode_is_table_by_default_and_a_bad_value_names_the_variable(monkeypatch):
    monkeypatch.delenv(autotune.MODE_VAR, raising=False)
    assert autotune.mode() == "table"
    for value in ("on", "off", "ON", " refresh ", "table"):
        monkeypatch.setenv(autotune.MODE_VAR, value)
        assert autotune.mode() == value.strip().lower()
    monkeypatch.setenv(autotune.MODE_VAR, "sometimes")
    with pytest.raises(ValueError, match="WORKBENCH_AUTOTUNE.*sometimes"):
        autotune.mode()


def test_cache_dir_defaults_to_the_user_cache(monkeypatch, tmp_path):
    monkeypatch.delenv(autotune.CACHE_VAR)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert autotune.cache_dir() == tmp_path / ".cache" / "workbench"


# ----------------------------------------------------------------------------- keys


def test_the_key_changes_with_source_configs_key_values_device_and_versions():
    base = autotune.digest(_key())
    assert autotune.digest(_key()) == base
    assert autotune.digest(_key(candidates=tuple(_configs()))) == base  # canonical: tuples are lists
    changed = [
        _key(source="abd"), _key(candidates=_configs(2)), _key(candidates=_configs()[::-1]),
        _key(candidates=[triton.Config({"BV": 16}, num_warps=8, num_stages=2), *_configs()[1:]]),
        _key(key_values={"H": 4, "K": {"shape": [4], "dtype": "f"}}),
        _key(key_values={"H": 2, "K": {"shape": [8], "dtype": "f"}}),
        _key(arrays=[["q", "float32", "given"]]), _key(arrays=[["q", "bfloat16", "empty"]]),
        _key(device="NVIDIA H200"), _key(versions={"triton": "3.9.1"}),
    ]
    digests = {autotune.digest(k) for k in changed}
    assert base not in digests and len(digests) == len(changed)


def _recurrent_call(V=16, gk=True, N=2, T=24):
    """The arguments of workbench.recurrent's forward launch, abstract."""
    H, K = 2, 16
    TT = N * T
    f = jax.ShapeDtypeStruct
    args = (f((1, TT, H, K), jnp.bfloat16), f((1, TT, H, K), jnp.bfloat16), f((1, TT, H, V), jnp.bfloat16),
            f((1, TT, H, K), jnp.float32) if gk else f(launch.ABSENT_SHAPE, jnp.int8), f(launch.ABSENT_SHAPE, jnp.int8),
            f((N, H, K, V), jnp.float32), f((N + 1,), jnp.int32))
    outs = [f((1, TT, H, V), jnp.bfloat16), f((N, H, K, V), jnp.float32), f((0,), jnp.float32)]
    meta = dict(scale=0.25, H=H, K=K, V=V, BK=16, CHUNK=recurrent_kernels.CHUNK, REVERSE=False)
    return args, outs, meta


def _plan(**kw):
    args, outs, meta = _recurrent_call(**kw)
    return autotune.plan(recurrent_kernels.recurrent_fwd_kernel, args, outs, meta, device="NVIDIA H100",
                         versions={"triton": "3.9.0"})


def test_a_real_kernels_plan_prunes_as_triton_does_and_keys_its_autotune_arguments():
    p = _plan(V=16)
    assert p.key["kernel"] == "recurrent_fwd_kernel" and p.inner is recurrent_kernels.recurrent_fwd_kernel.fn
    # _prune_fwd keeps BV ≤ next_power_of_2(V) = 16: the three warp counts of BV = 16
    assert [(c.kwargs["BV"], c.num_warps) for c in p.candidates] == [(16, 1), (16, 2), (16, 4)]
    # key=["H", "K", "V", "USE_GK", "USE_GV", "SAVE"]: metaparams by value, heuristic flags evaluated
    assert p.key["key"] == {"H": 2, "K": 16, "V": 16, "USE_GK": True, "USE_GV": False, "SAVE": False}
    assert ["gv", "int8", "empty"] in p.key["arrays"] and ["cu_seqlens", "int32", "given"] in p.key["arrays"]
    assert len({autotune.digest(_plan(**kw).key) for kw in ({}, {"V": 32}, {"gk": False})}) == 3
    assert autotune.digest(_plan(T=40).key) == autotune.digest(p.key)  # T is not an autotune key


def test_the_key_holds_the_launch_size_in_programs_rounded_to_a_power_of_two():
    """`programs`: the grid's size with the first candidate's blocks, to the nearest power of two, so that a
    batch of 1 and one of 8 are tuned (and looked up in the table) apart, and T = 1000 and 1100 are not."""
    assert [autotune.programs(g, {}) for g in ((3, 5), 48, (1, 1, 1), (0, 4), (2, 3, 4))] == [16, 64, 1, 1, 32]
    assert autotune.programs(lambda m: (64 // m["BV"], 12), {"BV": 16}) == 64  # 48 programs
    args, outs, meta = _recurrent_call(V=64)

    def plan(n):  # recurrent's forward grid: (V / BV, N·H), its first candidate's BV
        return autotune.plan(recurrent_kernels.recurrent_fwd_kernel, args, outs, meta, device="NVIDIA H100",
                             versions={"triton": "3.6.0"}, grid=lambda m: (64 // m["BV"], n * 2))

    p = plan(1)
    assert p.key["key"]["programs"] == autotune.programs((64 // p.candidates[0].kwargs["BV"], 2), {})
    assert plan(8).key["key"]["programs"] == 8 * p.key["key"]["programs"]
    assert autotune.digest(plan(1).key) != autotune.digest(plan(8).key)


# ----------------------------------------------------------------------------- store


def test_the_store_round_trips_and_ignores_what_it_cannot_use(tmp_path):
    store = autotune.Store(tmp_path / "s")
    key = _key()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert store.read(key) is None  # no file: no warning
        path = store.write(key, {"config": 1})
    assert path == store.path(key) and path.name == autotune.digest(key) + ".json"
    assert store.read(key)["config"] == 1
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left

    for text, why in (("{not json", "corrupt"), ("[1, 2]", "corrupt"),
                      (json.dumps({"format": autotune.FORMAT, "key": _key(source="x"), "config": 1}), "another key"),
                      (json.dumps({"format": autotune.FORMAT + 1, "key": key, "config": 1}), "format")):
        path.write_text(text)
        with pytest.warns(autotune.CacheWarning, match=why):
            assert store.read(key) is None
    path.write_bytes(b"\xff\xfe\x00")
    with pytest.warns(autotune.CacheWarning, match="unreadable"):
        assert store.read(key) is None


def test_an_unwritable_cache_folder_is_a_warning(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    store = autotune.Store(blocker / "autotune")  # a folder under a regular file cannot exist
    with pytest.warns(autotune.CacheWarning, match="could not write"):
        assert store.write(_key(), {"config": 1}) is None
    with pytest.warns(autotune.CacheWarning, match="could not write"):
        choice = autotune.Choices(store).tune(_key(), _configs(), Timer({16: 3.0, 32: 1.0, 64: 2.0}))
    assert choice.config.kwargs["BV"] == 32  # still chosen, only not remembered


WRITER = textwrap.dedent("""
    import importlib.util, sys
    spec = importlib.util.spec_from_file_location("cache_alone", sys.argv[1])
    mod = importlib.util.module_from_spec(spec); sys.modules[spec.name] = mod; spec.loader.exec_module(mod)
    store, key = mod.Store(sys.argv[2]), {"kernel": "k", "n": 1}
    print("ready", flush=True); sys.stdin.readline()
    for i in range(50):
        store.write(key, {"value": sys.argv[3], "padding": sys.argv[3] * 20000, "i": i})
""")


def test_two_processes_writing_one_key_leave_one_whole_file(tmp_path):
    folder = tmp_path / "shared"
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(CACHE_PY), str(folder), value],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for value in "ab"]
    for w in writers:
        assert w.stdout.readline().strip() == "ready"
    for w in writers:  # both start writing together
        w.stdin.write("go\n")
        w.stdin.flush()
    store, key, seen = autotune.Store(folder), {"kernel": "k", "n": 1}, set()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a torn file would be a CacheWarning
        while any(w.poll() is None for w in writers):
            entry = store.read(key)
            if entry is not None:
                assert entry["padding"] == entry["value"] * 20000
                seen.add(entry["value"])
        assert [w.wait() for w in writers] == [0, 0]
        final = store.read(key)
    for w in writers:
        w.stdin.close()
        w.stdout.close()
    assert final["value"] in "ab" and final["i"] == 49 and final["padding"] == final["value"] * 20000
    assert [p.name for p in folder.iterdir()] == [store.path(key).name]
    assert seen <= {"a", "b"}


# ----------------------------------------------------------------------------- choice


def test_the_fastest_is_chosen_stored_and_found_again_without_timing(tmp_path):
    store = autotune.Store(tmp_path)
    key, configs = _key(), _configs()
    timer = Timer({16: 3.0, 32: 1.0, 64: 2.0})
    book = autotune.Choices(store)
    assert book.lookup(key, configs) is None
    choice = book.tune(key, configs, timer)
    assert (choice.config.kwargs["BV"], choice.source, timer.calls) == (32, "tuned", [16, 32, 64])
    entry = store.read(key)
    assert entry["config"] == autotune.config_fields(configs[1])
    assert [t["ms"] for t in entry["timings_ms"]] == [3.0, 1.0, 2.0]

    assert book.lookup(key, configs).source == "memory"
    fresh = autotune.Choices(store)  # a new process
    hit = fresh.lookup(key, configs)
    assert (hit.config.kwargs["BV"], hit.source) == (32, "disk") and timer.calls == [16, 32, 64]
    for other in (_key(source="changed"), _key(candidates=_configs(2)), _key(device="NVIDIA H200"),
                  _key(versions={"triton": "3.8.0"})):
        assert fresh.lookup(other, configs) is None
    assert autotune.Choices(store).lookup(key, configs[:1]).source == "only"  # one candidate: nothing to time


def test_a_cached_choice_of_the_eager_timer_is_timed_again(tmp_path, monkeypatch):
    """An entry as the eager timer wrote it (no "timer" field; it ranked by the host's time to build each
    launch) is not a choice: looked up it is None, once with a warning, and tuning replaces it."""
    monkeypatch.setattr(autotune, "_WARNED", set())
    store = autotune.Store(tmp_path)
    key, configs = _key(), _configs()
    store.write(key, {"config": autotune.config_fields(configs[0]), "timings_ms": []})  # BV=16, eager-timed
    with pytest.warns(autotune.CacheWarning, match="eager launches"):
        assert autotune.Choices(store).lookup(key, configs) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert autotune.Choices(store).lookup(key, configs) is None  # warned once per process
    book = autotune.Choices(store)
    assert book.tune(key, configs, Timer({16: 3.0, 32: 1.0, 64: 2.0})).config.kwargs["BV"] == 32
    assert store.read(key)["timer"] == autotune.TIMER
    assert autotune.Choices(store).lookup(key, configs).source == "disk"


class SequenceTimer(Timer):
    """A stub timer whose configs (by BV) give their listed times in turn."""

    def __call__(self, config):
        self.calls.append(config.kwargs["BV"])
        result = self.times[config.kwargs["BV"]].pop(0)
        if isinstance(result, Exception):
            raise result
        return result


def test_near_equal_candidates_are_timed_again_and_ranked_by_their_median(tmp_path):
    """BV=16 wins its first timing by luck (0.95 ms) but is 1.3 ms twice after; BV=32 is 1.0 ms each time;
    BV=64, 30 % slower, is timed once. The median picks BV=32 and the cache keeps every timing."""
    store = autotune.Store(tmp_path)
    timer = SequenceTimer({16: [0.95, 1.3, 1.3], 32: [1.0, 1.0, 1.0], 64: [1.3]})
    choice = autotune.Choices(store).tune(_key(), _configs(), timer)
    assert choice.config.kwargs["BV"] == 32
    assert timer.calls == [16, 32, 64] + [16, 32] * autotune.CONFIRM_ROUNDS  # round by round, fastest first
    timings = store.read(_key())["timings_ms"]
    assert [t.get("again") for t in timings] == [[1.3, 1.3], [1.0, 1.0], None]
    assert store.read(_key())["config"] == autotune.config_fields(_configs()[1])


def test_a_contender_that_fails_when_timed_again_loses(tmp_path):
    timer = SequenceTimer({16: [1.0, RuntimeError("launch failed"), 1.0], 32: [1.05, 1.05, 1.05], 64: [5.0]})
    choice = autotune.Choices(autotune.Store(tmp_path)).tune(_key(), _configs(), timer)
    assert choice.config.kwargs["BV"] == 16  # median of (1.0, inf, 1.0) is 1.0: one failure is an outlier
    timer = SequenceTimer({16: [1.0, RuntimeError("x"), RuntimeError("y")], 32: [1.05, 1.05, 1.05], 64: [5.0]})
    choice = autotune.Choices(autotune.Store(tmp_path / "b")).tune(_key(), _configs(), timer)
    assert choice.config.kwargs["BV"] == 32
    assert autotune.Store(tmp_path / "b").read(_key())["timings_ms"][0]["again"] == [None, None]


def test_a_clear_winner_is_not_timed_again(tmp_path):
    timer = Timer({16: 2.0, 32: 1.0, 64: 1.0 * (1 + autotune.CONFIRM_MARGIN) + 0.01})
    choice = autotune.Choices(autotune.Store(tmp_path)).tune(_key(), _configs(), timer)
    assert (choice.config.kwargs["BV"], timer.calls) == (32, [16, 32, 64])
    assert all("again" not in t for t in autotune.Store(tmp_path).read(_key())["timings_ms"])


def test_refresh_times_again_once_and_overwrites(tmp_path):
    store = autotune.Store(tmp_path)
    key, configs = _key(), _configs()
    autotune.Choices(store).tune(key, configs, Timer({16: 3.0, 32: 1.0, 64: 2.0}))
    book = autotune.Choices(store)  # a new process, WORKBENCH_AUTOTUNE=refresh
    assert book.lookup(key, configs).source == "disk"
    assert book.lookup(key, configs, refresh=True) is None  # what it read from disk does not count
    choice = book.tune(key, configs, Timer({16: 0.5, 32: 1.0, 64: 2.0}))
    assert choice.config.kwargs["BV"] == 16
    assert book.lookup(key, configs, refresh=True).source == "memory"  # tuned in this process
    assert store.read(key)["config"] == autotune.config_fields(configs[0])


def test_a_config_that_fails_loses_and_none_running_is_an_error(tmp_path):
    book = autotune.Choices(autotune.Store(tmp_path))
    choice = book.tune(_key(), _configs(), Timer({16: RuntimeError("out of shared memory"), 32: 2.0, 64: math.inf}))
    assert choice.config.kwargs["BV"] == 32
    timings = book.store.read(_key())["timings_ms"]
    assert [t["ms"] for t in timings] == [None, 2.0, None] and "shared memory" in timings[0]["error"]
    with pytest.raises(RuntimeError, match="no config of k ran"):
        book.tune(_key(source="other"), _configs(), Timer({16: ValueError("x"), 32: ValueError("y"), 64: math.inf}))


class HostCalls:
    """`run(xs)` for `time_on_device`/`chained` on a CPU: a host callback (as opaque to XLA as a Triton
    launch) that counts its calls and returns (2 × the floating input, the integer input + 1)."""

    def __init__(self, floating, integer):
        self.calls = 0
        self.shapes = (jax.ShapeDtypeStruct(floating.shape, floating.dtype),
                       jax.ShapeDtypeStruct(integer.shape, integer.dtype))

    def host(self, f, i):
        self.calls += 1
        return np.asarray(f) * 2, np.asarray(i) + 1

    def __call__(self, xs):
        integer, floating, scale = xs  # the launch's arguments: arrays and a Python scalar
        assert scale == 5
        return jax.pure_callback(self.host, self.shapes, floating, integer)


@pytest.mark.parametrize("n", [1, 3, 7])
def test_a_chain_launches_every_copy_once_per_run_and_returns_the_last(n):
    floating, integer = jnp.linspace(-1, 1, 128, dtype=jnp.bfloat16).reshape(16, 8), jnp.arange(4, dtype=jnp.int32)
    run = HostCalls(floating, integer)
    program, arrays = device_time.chained(run, [integer, floating, 5], n)
    assert len(arrays) == 2  # the scalar stays a Python value
    out = jax.block_until_ready(program(arrays))
    assert run.calls == n  # XLA merged no copy and dropped none
    np.testing.assert_array_equal(np.asarray(out[0], np.float32), np.asarray(floating, np.float32) * 2)
    np.testing.assert_array_equal(out[1], np.arange(4) + 1)
    # what the chain is for: the same launch written n times, without the link, runs once
    run.calls = 0
    jax.block_until_ready(jax.jit(lambda a: [run([a[0], a[1], 5]) for _ in range(n)][-1])(arrays))
    assert run.calls == 1


def test_a_chain_needs_a_floating_input():
    integer = jnp.arange(4, dtype=jnp.int32)
    assert device_time.chained(lambda xs: xs[0] + 1, [integer], 3) is None


@pytest.mark.parametrize("chain_ms, chained", [(1e6, True), (0.0, False)])
def test_a_call_shorter_than_chain_ms_is_timed_as_a_chain_in_one_program(monkeypatch, chain_ms, chained):
    monkeypatch.setattr(device_time, "CHAIN_MS", chain_ms)
    monkeypatch.setattr(device_time, "MAX_CHAIN", 4)
    floating, integer = jnp.ones((16, 8), jnp.float32), jnp.arange(4, dtype=jnp.int32)
    run = HostCalls(floating, integer)

    @jax.jit
    def caller(x):  # as `autotune.call` times: while the caller's function is traced
        with jax.ensure_compile_time_eval():
            ms = device_time.time_on_device(run, [integer, floating, 5])
        assert math.isfinite(ms) and ms > 0
        return x + 1

    caller(1.0)
    eager = 1 + device_time.SAMPLES * device_time.REPS
    assert run.calls == eager + (4 * (1 + device_time.SAMPLES) if chained else 0)


def test_the_time_is_the_compiled_programs_not_the_hosts_building_of_each_launch(monkeypatch):
    """A launch whose building on the host takes 60 ms (as an eager Triton launch's did, 8-15 ms on an
    H200, longer than the kernel) and whose device work takes none: the host cost is paid once, when the
    program is traced, and the time reported is far below it. Eager calls back to back report >= 60 ms."""
    monkeypatch.setattr(device_time, "CHAIN_MS", 0.0)  # no chain: the plain calls' time is the answer
    floating, integer = jnp.ones((16, 8), jnp.float32), jnp.arange(4, dtype=jnp.int32)
    device = HostCalls(floating, integer)
    built = []

    def run(xs):
        built.append(1)
        time.sleep(0.06)  # the host building the launch
        return device(xs)

    ms = device_time.time_on_device(run, [integer, floating, 5])
    assert len(built) == 1 and device.calls == 1 + device_time.SAMPLES * device_time.REPS
    assert ms < 30, ms


def test_a_corrupt_entry_is_tuned_again_and_replaced(tmp_path):
    store = autotune.Store(tmp_path / "s")
    key, configs = _key(), _configs()
    store.path(key).parent.mkdir()
    store.path(key).write_text('{"format": 1, "key": ')
    book = autotune.Choices(store)
    with pytest.warns(autotune.CacheWarning, match="corrupt"):
        assert book.lookup(key, configs) is None
    book.tune(key, configs, Timer({16: 3.0, 32: 1.0, 64: 2.0}))
    assert store.read(key)["config"]["kwargs"] == {"BV": 32}
    store.write(key, {"config": autotune.config_fields(triton.Config({"BV": 128}))})  # not a candidate
    with pytest.warns(autotune.CacheWarning, match="not a candidate"):
        assert autotune.Choices(store).lookup(key, configs) is None


# ----------------------------------------------------------------------------- the launcher's GPU branch


class Launcher:
    """Stubs of `gpu_call.launch` (calling the object) and `gpu_call.launch_autotuned` (its `autotuned`):
    each records its launches; outputs are zeros, traced under `jax.jit` as a real launch's are (a host
    callback): a kernel's output that a later kernel takes as an integer input has no concrete value to tune
    on there, as on the GPU."""

    def __init__(self):
        self.launches = []

    def __call__(self, args, *, kernel, out_shapes, num_warps=None, num_stages=None, num_ctas=1, metaparams, **rest):
        self.launches.append(dict(args=args, kernel=kernel, num_warps=num_warps, num_stages=num_stages,
                                  num_ctas=num_ctas, meta=metaparams))
        return _zeros(out_shapes)

    def autotuned(self, args, *, configs, kernel, out_shapes, metaparams, **rest):
        self.launches.append(dict(args=args, kernel=kernel, configs=list(configs), meta=metaparams))
        return _zeros(out_shapes)


def _zeros(out_shapes):
    shapes = [jax.ShapeDtypeStruct(tuple(s.shape), s.dtype) for s in out_shapes]
    return list(jax.pure_callback(lambda: [np.zeros(s.shape, s.dtype) for s in shapes], shapes))


def _gpu_call(args, launcher, timer=None, **kw):
    _, outs, meta = _recurrent_call()
    return autotune.call(args, kernel=recurrent_kernels.recurrent_fwd_kernel, out_shapes=outs, grid=(1,),
                         name="t", zeroed_outputs=(), input_output_aliases=None, num_warps=None, num_stages=None,
                         metaparams=meta, launch=launcher, launch_autotuned=launcher.autotuned, timer=timer,
                         device="NVIDIA H100", **kw)


def _arrays():
    abstract, _, _ = _recurrent_call()
    return [jnp.ones(a.shape, a.dtype) for a in abstract]


CU = np.array([0, 24, 48], np.int32)


def test_traced_call_is_tuned_ahead_on_stand_ins_then_remembered(cache_dir):
    launcher, timed = Launcher(), []

    def timer(config, run):
        run()
        timed.append(config.num_warps)
        return {1: 2.0, 2: 1.0, 4: 3.0}[config.num_warps]

    def traced(*xs):
        return _gpu_call(xs, launcher, timer, tune_inputs={"cu_seqlens": CU})

    jax.jit(traced)(*_arrays())
    assert timed == [1, 2, 4]
    tuning, final = launcher.launches[:3], launcher.launches[3]
    for t in tuning:  # eager, on concrete made-up inputs: floats in [-0.1, 0], the stand-in, empties
        assert not any(isinstance(a, jax.core.Tracer) for a in t["args"])
        q, gk, gv, cu = (np.asarray(t["args"][i], np.float32) for i in (0, 3, 4, 6))
        assert -0.101 <= q.min() and q.max() <= 0 and q.std() > 0 and gk.max() <= 0
        assert gv.shape == launch.ABSENT_SHAPE and (cu == CU).all()
        assert t["kernel"] is recurrent_kernels.recurrent_fwd_kernel.fn
    assert isinstance(final["args"][0], jax.core.Tracer)
    assert final["kernel"] is recurrent_kernels.recurrent_fwd_kernel.fn  # heuristics evaluated by the launch
    assert (final["num_warps"], final["meta"]["BV"], final["meta"]["H"]) == (2, 16, 2)
    assert autotune.STATS["chosen_tuned"] == 1
    (entry,) = (cache_dir / "autotune").glob("*.json")
    assert json.loads(entry.read_text())["config"]["num_warps"] == 2

    jax.jit(lambda *xs: traced(*xs))(*_arrays())  # traced again: remembered in the process
    assert timed == [1, 2, 4] and autotune.STATS["chosen_memory"] == 1
    autotune._CHOICES.clear()  # a new process: from disk, no stand-in needed
    jax.jit(lambda *xs: _gpu_call(xs, launcher, timer))(*_arrays())
    assert timed == [1, 2, 4] and autotune.STATS["chosen_disk"] == 1
    assert launcher.launches[-1]["num_warps"] == 2


def test_a_precompiler_gets_every_candidate_before_any_is_timed_and_never_stops_the_tuning(cache_dir):
    """`autotune.precompiling` (what `workbench tune --compile-workers` installs): called once per tuned key with the
    launched kernel, the made-up inputs the candidates are timed on and all the candidates, before the first timing;
    not called where a choice exists (memory, disk) or nothing is timed (`off`); one that raises is a warning and
    the tuning goes on; gone when its block closes."""
    launcher, events = Launcher(), []

    def timer(config, run):
        run()
        events.append(("timed", config.num_warps))
        return float(config.num_warps)

    def precompiler(kernel, args, out_shapes, configs, metaparams):
        assert kernel is recurrent_kernels.recurrent_fwd_kernel
        assert not any(isinstance(a, jax.core.Tracer) for a in args) and len(out_shapes) == 3
        assert metaparams["H"] == 2
        events.append(("precompiled", tuple(c.num_warps for c in configs)))

    call = jax.jit(lambda *xs: _gpu_call(xs, launcher, timer, tune_inputs={"cu_seqlens": CU}))
    with autotune.precompiling(precompiler):
        call(*_arrays())
        assert events[0] == ("precompiled", (1, 2, 4)) and [e[0] for e in events[1:]] == ["timed"] * (len(events) - 1)
        count = len(events)
        jax.jit(lambda *xs: _gpu_call(xs, launcher, timer, tune_inputs={"cu_seqlens": CU}))(*_arrays())
        autotune._CHOICES.clear()
        jax.jit(lambda *xs: _gpu_call(xs, launcher, timer))(*_arrays())
        assert len(events) == count  # remembered, then from disk: nothing compiled ahead, nothing timed
    assert autotune._PRECOMPILERS == []

    def broken(*_):
        raise RuntimeError("no child could start")

    autotune._CHOICES.clear()
    for entry in (cache_dir / "autotune").glob("*.json"):
        entry.unlink()
    events.clear()
    with autotune.precompiling(broken), pytest.warns(UserWarning, match="precompiling recurrent_fwd_kernel.*no child"):
        _gpu_call(_arrays(), launcher, timer)
    assert [e[0] for e in events] == ["timed"] * len(events) and len(events) >= 3


def test_a_traced_integer_without_stand_in_falls_back_with_one_warning(cache_dir):
    launcher = Launcher()
    timer = lambda config, run: pytest.fail("nothing can be timed")  # noqa: E731
    with pytest.warns(UserWarning, match="recurrent_fwd_kernel.*cu_seqlens"):
        jax.jit(lambda *xs: _gpu_call(xs, launcher, timer))(*_arrays())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per kernel
        jax.jit(lambda *xs: _gpu_call(xs, launcher, timer))(*[x + 0 for x in _arrays()])
    # jaxlib tunes at the first run: every candidate handed over, under the kernel's heuristics
    candidates = autotune.plan(recurrent_kernels.recurrent_fwd_kernel, _arrays(), _recurrent_call()[1],
                               _recurrent_call()[2], device="NVIDIA H100", versions=autotune.versions()).candidates
    assert len(candidates) > 1 and len(launcher.launches) == 2
    for t in launcher.launches:
        assert t["kernel"] is recurrent_kernels.recurrent_fwd_kernel.fn and t["configs"] == candidates
    assert autotune.STATS["fallback"] == 2 and not (cache_dir / "autotune").exists()


def test_concrete_integers_need_no_stand_in_and_off_takes_the_first_candidate(monkeypatch, cache_dir):
    launcher, timed = Launcher(), []
    timer = lambda config, run: timed.append(config) or 10.0 - config.num_warps  # noqa: E731
    _gpu_call(_arrays(), launcher, timer)  # eager: cu_seqlens is concrete
    assert len(timed) == 3 and launcher.launches[-1]["num_warps"] == max(c.num_warps for c in timed)
    tuned_files = sorted((cache_dir / "autotune").glob("*.json"))

    monkeypatch.setenv(autotune.MODE_VAR, "off")  # nothing timed, read or written: the first candidate runs
    autotune._CHOICES.clear()
    autotune.STATS.clear()
    _, outs, meta = _recurrent_call()
    first = autotune.plan(recurrent_kernels.recurrent_fwd_kernel, _arrays(), outs, meta, device="NVIDIA H100",
                          versions=autotune.versions()).candidates[0]
    assert first.num_warps != max(c.num_warps for c in timed)  # so the launch below is not the tuned choice
    launcher = Launcher()
    _gpu_call(_arrays(), launcher, timer)
    assert len(timed) == 3 and autotune.STATS == {"chosen_first": 1}
    (launched,) = launcher.launches
    assert launched["kernel"] is recurrent_kernels.recurrent_fwd_kernel.fn
    assert (launched["num_warps"], launched["num_stages"]) == (first.num_warps, first.num_stages)
    assert {k: launched["meta"][k] for k in first.kwargs} == first.kwargs
    assert sorted((cache_dir / "autotune").glob("*.json")) == tuned_files


def test_a_stand_in_may_be_a_function_called_only_when_tuning(cache_dir):
    calls = []

    def cu():
        calls.append(1)
        return _bounds.equal_split(2, 48)

    traced = lambda *xs: _gpu_call(xs, Launcher(), lambda c, r: float(c.num_warps),  # noqa: E731
                                   tune_inputs={"cu_seqlens": cu})
    jax.jit(traced)(*_arrays())
    jax.jit(lambda *xs: traced(*xs))(*_arrays())  # remembered: nothing to tune, the function is not called
    assert calls == [1] and autotune.STATS["chosen_tuned"] == 1 and autotune.STATS["chosen_memory"] == 1


def test_equal_split_is_arange_for_a_fixed_length_batch():
    assert _bounds.equal_split(4, 4 * 40).tolist() == list(range(0, 161, 40))
    assert _bounds.equal_split(3, 10).tolist() == [0, 3, 6, 10] and _bounds.equal_split(3, 10).dtype == np.int32
    assert _bounds.equal_split(0, 10).tolist() == [0]


def test_stand_ins_offered_to_every_launch_are_taken_where_the_kernel_has_them():
    offered = _bounds.StandIns(cu_seqlens=CU, bounds=np.zeros((4, 2), np.int32))  # the kernel has no bounds
    timed = []
    jax.jit(lambda *xs: _gpu_call(xs, Launcher(), lambda c, r: timed.append(c) or 1.0, tune_inputs=offered))(*_arrays())
    # every candidate timed once, and (all tie at 1 ms) again in each confirming round
    assert len(timed) == 3 * (1 + autotune.CONFIRM_ROUNDS) and autotune.STATS["chosen_tuned"] == 1
    assert autotune.STATS["fallback"] == 0


def _glue_cases():
    """(op name, function of (arrays, cu or None) → a scalar, arrays, packed length, cu_seqlens or None)."""
    import workbench

    key = iter(jax.random.split(jax.random.key(3), 40))
    x = lambda *shape: jax.random.normal(next(key), shape, jnp.float32)  # noqa: E731
    decay = lambda *shape: -jax.nn.softplus(x(*shape))  # noqa: E731
    H, K, V = 2, 64, 64  # wide enough that every autotuned kernel keeps several candidates after pruning
    total = lambda out: sum(jnp.sum(o.astype(jnp.float32)) for o in out)  # noqa: E731
    ops = {
        "recurrent": lambda a, cu: total(workbench.recurrent(*a, cu_seqlens=cu)),
        "chunk_gla": lambda a, cu: total(workbench.chunk_gla(*a, cu_seqlens=cu, chunk_size=16)),
        "chunk_kda": lambda a, cu: total(workbench.chunk_kda(*a, cu_seqlens=cu, chunk_size=16)),
        "recurrent_kda": lambda a, cu: total(workbench.recurrent_kda(*a, cu_seqlens=cu)),
    }
    for B, T, cu in ((2, 40, None), (1, 72, np.array([0, 17, 17, 72], np.int32))):
        for name, f in ops.items():
            if name in ("chunk_kda", "recurrent_kda"):
                arrays = (x(B, T, H, K) / 4, x(B, T, H, K) / 4, x(B, T, H, V), decay(B, T, H, K),
                          jax.nn.sigmoid(x(B, T, H)))
            elif name == "recurrent":
                arrays = (x(B, T, H, K), x(B, T, H, K), x(B, T, H, V), None, None, decay(B, T, H, K))
            else:
                arrays = (x(B, T, H, K), x(B, T, H, K), x(B, T, H, V), None, decay(B, T, H, K))
            yield name, f, arrays, B * T, cu


@pytest.mark.parametrize("varlen", [False, True], ids=["batch", "traced_cu_seqlens"])
def test_every_op_offers_stand_ins_for_its_traced_bounds(monkeypatch, varlen):
    """On the GPU branch (stub launcher and timer), a jitted forward+backward of recurrent, chunk_gla, chunk_kda
    and recurrent_kda tunes every autotuned kernel ahead on stand-ins (no fallback to jaxlib's autotuning):
    cu_seqlens = arange(B+1)·T for a batch (exact), the equal split for traced cu_seqlens, and the chunk-slot
    table of that split."""
    from workbench._bounds import chunk_bounds

    launcher, tuned = Launcher(), []

    def timer(config, run):
        before = len(launcher.launches)
        run()
        tuned.extend(launcher.launches[before:])
        return float(config.num_warps)

    real_call = autotune.call
    monkeypatch.setattr(launch, "INTERPRET", False)
    monkeypatch.setattr(autotune, "call", lambda *a, **kw: real_call(*a, **kw, launch=launcher, timer=timer,
                                                                     launch_autotuned=launcher.autotuned,
                                                                     device="stub GPU"))
    for name, f, arrays, TT, cu in _glue_cases():
        if varlen != (cu is not None):
            continue
        tuned.clear()
        before = autotune.STATS["chosen_tuned"]
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a fallback warns
            if cu is None:
                jax.jit(jax.grad(lambda a: f(a, None)))(arrays)
            else:
                jax.jit(jax.grad(f, argnums=0))(arrays, jnp.asarray(cu))
        assert autotune.STATS["fallback"] == 0, name
        assert autotune.STATS["chosen_tuned"] > before and tuned, name
        N = (len(cu) - 1) if cu is not None else arrays[0].shape[0]
        expected_cu = _bounds.equal_split(N, TT)
        if cu is None:
            assert expected_cu.tolist() == list(range(0, TT + 1, TT // N))
        for t in tuned:
            names = launch.unwrap(t["kernel"])[2].arg_names
            given = dict(zip(names, t["args"]))
            assert not any(isinstance(a, jax.core.Tracer) for a in t["args"]), (name, names)
            if "cu_seqlens" in given:
                np.testing.assert_array_equal(np.asarray(given["cu_seqlens"]), expected_cu)
            if "bounds" in given:
                np.testing.assert_array_equal(np.asarray(given["bounds"]),
                                              np.asarray(chunk_bounds(jnp.asarray(expected_cu), TT, 16)))


def test_stand_ins_must_name_an_argument_and_match_it():
    with pytest.raises(ValueError, match="'bounds'.*not arguments of recurrent_fwd_kernel"):
        _gpu_call(_arrays(), Launcher(), tune_inputs={"bounds": CU})
    with pytest.raises(ValueError, match="tune_inputs\\['cu_seqlens'\\]: expected shape \\(3,\\) and dtype int32"):
        jax.jit(lambda *xs: _gpu_call(xs, Launcher(), lambda c, r: 1.0,
                                      tune_inputs={"cu_seqlens": CU.astype(np.int64)}))(*_arrays())


# ----------------------------------------------------------------------------- the tuning table


def _table_dir(tmp_path, entries, device="NVIDIA H100"):
    from workbench import tuning_table

    folder = tmp_path / "table"
    tuning_table.Table(device, entries).write(folder)
    return folder


def _entry(key, config):
    from workbench import tuning_table

    return tuning_table.entry_of(key, autotune.config_fields(config))


def test_the_table_answers_before_anything_is_timed_and_the_cache_before_the_table(tmp_path, monkeypatch):
    """Precedence in the default mode: this process's memory, the disk cache, the table (exact, then nearest
    by head count and launch size), and only then timing; WORKBENCH_AUTOTUNE=on skips the table."""
    configs = _configs()
    folder = _table_dir(tmp_path, [_entry(_key(), configs[2])])
    book = autotune.Choices(autotune.Store(tmp_path / "store"))
    exact = book.from_table(_key(), configs, folder)
    assert (exact.config.kwargs["BV"], exact.source) == (64, "table")
    assert book.lookup(_key(), configs).source == "memory"  # remembered, not timed
    other_heads = _key(key_values={"H": 16, "K": {"shape": [4], "dtype": "f"}})
    nearest = autotune.Choices(autotune.Store(tmp_path / "store")).from_table(other_heads, configs, folder)
    assert (nearest.config.kwargs["BV"], nearest.source) == (64, "table_nearest")
    # a launch's size is near too: of two entries, the one nearer in programs (log scale) serves
    sized = lambda n, c: _entry(_key(key_values={"H": 2, "K": {"shape": [4], "dtype": "f"}, "programs": n}), c)  # noqa: E731
    two = _table_dir(tmp_path / "sized", [sized(64, configs[0]), sized(4096, configs[1])])
    for n, bv in ((16, 16), (256, 16), (1024, 32), (1 << 20, 32)):
        got = autotune.Choices(autotune.Store(tmp_path / f"s{n}")).from_table(
            _key(key_values={"H": 2, "K": {"shape": [4], "dtype": "f"}, "programs": n}), configs, two)
        assert (got.config.kwargs["BV"], got.source) == (bv, "table_nearest"), n
    # another head dim is not "near": the table has nothing for it
    assert book.from_table(_key(key_values={"H": 2, "K": {"shape": [8], "dtype": "f"}}), configs, folder) is None
    assert book.from_table(_key(arrays=[["q", "float32", "given"]]), configs, folder) is None  # another dtype
    assert book.from_table(_key(device="NVIDIA H200"), configs, folder) is None  # a device not in the table
    assert book.from_table(_key(), configs[:2], folder) is None  # its config is no candidate here
    # the disk cache wins over the table
    store = autotune.Store(tmp_path / "store2")
    autotune.Choices(store).tune(_key(), configs, Timer({16: 3.0, 32: 1.0, 64: 2.0}))
    fresh = autotune.Choices(store)
    assert fresh.lookup(_key(), configs).config.kwargs["BV"] == 32


def test_a_kind_without_an_answer_takes_its_siblings_and_its_own_answer_first(tmp_path):
    """An H100 80GB HBM3 launch with no usable entry of its own takes the H200's (exact, else nearest) as
    "table_sibling[_nearest]", and the other way round; its own entry, even a nearest one, wins; a kind
    without a sibling gets nothing from another kind's file."""
    from workbench import tuning_table

    h100, h200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"
    assert tuning_table.SIBLINGS[h100] == h200 and tuning_table.SIBLINGS[h200] == h100
    configs = _configs()
    near = {"H": 16, "K": {"shape": [4], "dtype": "f"}}
    folder = tmp_path / "table"
    tuning_table.Table(h200, [_entry(_key(device=h200), configs[2])]).write(folder)
    tuning_table.Table(h100, [_entry(_key(device=h100, key_values=near), configs[0])]).write(folder)

    stores = iter(range(100))

    def chosen(device, table=folder, **kw):
        book = autotune.Choices(autotune.Store(tmp_path / f"store-{next(stores)}"))  # nothing remembered
        choice = book.from_table(_key(device=device, **kw), configs, table)
        return None if choice is None else (configs.index(choice.config), choice.source)

    assert chosen(h200) == (2, "table")
    assert chosen(h100) == (0, "table_nearest")  # its own nearest entry before the sibling's exact one
    assert chosen(h200, key_values=near) == (2, "table_nearest")
    lone = tmp_path / "lone"  # the H200's file alone
    tuning_table.Table(h200, [_entry(_key(device=h200), configs[2])]).write(lone)
    assert chosen(h100, lone) == (2, "table_sibling")
    assert chosen(h100, lone, key_values=near) == (2, "table_sibling_nearest")
    assert chosen("NVIDIA A100-SXM4-80GB", lone) is None  # a kind without a sibling


def test_a_table_for_another_source_is_ignored_with_one_warning(tmp_path):
    configs = _configs()
    folder = _table_dir(tmp_path, [_entry(_key(source="old"), configs[2])])
    book = autotune.Choices(autotune.Store(tmp_path / "store"))
    with pytest.warns(UserWarning, match="made for another kernel source"):
        assert book.from_table(_key(), configs, folder) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per kernel
        assert book.from_table(_key(), configs, folder) is None


def test_an_entry_of_another_triton_serves_until_one_of_this_triton_exists(tmp_path):
    """Entries tuned with another Triton release serve a launch (exactly or as the nearest); one tuned with the
    launch's own release wins among equally near entries, and an exact key beats a nearer release."""
    configs = _configs()
    older = _key(versions={"triton": "3.6.0"})
    near = _key(versions={"triton": "3.6.0"}, key_values={"H": 4, "K": {"shape": [4], "dtype": "f"}})
    cases = [([_entry(older, configs[2])], (2, "table")),
             ([_entry(near, configs[1])], (1, "table_nearest")),
             ([_entry(older, configs[2]), _entry(_key(), configs[0])], (0, "table")),
             ([_entry(_key(), configs[0]), _entry(older, configs[2])], (0, "table")),
             ([_entry(older, configs[2]), _entry(_key(key_values=near["key"]), configs[1])], (2, "table"))]
    for i, (entries, expected) in enumerate(cases):
        folder = _table_dir(tmp_path / str(i), entries)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            choice = autotune.Choices(autotune.Store(tmp_path / f"s{i}")).from_table(_key(), configs, folder)
        assert (configs.index(choice.config), choice.source) == expected, i


def test_a_table_that_is_not_valid_json_is_ignored_with_a_warning(tmp_path):
    from workbench import tuning_table

    folder = tmp_path / "table"
    folder.mkdir()
    tuning_table.device_file("NVIDIA H100", folder).write_text("[{not json")
    with pytest.warns(UserWarning, match="ignoring .*NVIDIA_H100.json"):
        table = tuning_table.Table.load("NVIDIA H100", folder)
    assert table.entries == [] and table.choose(_key(), [autotune.config_fields(c) for c in _configs()]) is None
    tuning_table.device_file("NVIDIA H100", folder).write_text('[{"kernel": "k"}]')  # JSON, not entries
    with pytest.warns(UserWarning, match="expected a list of entries"):
        assert tuning_table.Table.load("NVIDIA H100", folder).entries == []


def test_the_table_builder_turns_a_tuning_run_into_entries_that_choose_the_same(tmp_path):
    """`workbench tune --write-table`'s steps on a stub timer: a tuning run's store becomes table entries, merged
    into the device's file (a new entry replaces the one with the same identity), and a fresh process with
    an empty cache then chooses what the run chose without timing."""
    from workbench import tuning_table

    configs = _configs()
    store = autotune.Store(tmp_path / "run")
    keys = [_key(), _key(key_values={"H": 8, "K": {"shape": [4], "dtype": "f"}})]
    autotune.Choices(store).tune(keys[0], configs, Timer({16: 3.0, 32: 1.0, 64: 2.0}))
    autotune.Choices(store).tune(keys[1], configs, Timer({16: 0.5, 32: 1.0, 64: 2.0}))
    entries = tuning_table.entries_from_store(tmp_path / "run")
    assert sorted(e["config"]["kwargs"]["BV"] for e in entries) == [16, 32]
    folder = tmp_path / "table"
    stale = {**_entry(keys[1], configs[2]), "source": "an earlier source of the kernel"}
    other = {**_entry(keys[1], configs[2]), "kernel": "another_kernel", "source": "its own source"}
    old = tuning_table.Table("NVIDIA H100", [_entry(keys[0], configs[2]), stale, other])  # keys[0]: an older choice
    path = old.merged(entries).write(folder)
    assert path == tuning_table.device_file("NVIDIA H100", folder)
    written = json.loads(path.read_text())
    assert len(written) == 3 and stale not in written and other in written  # the kernel's old source is gone
    book = autotune.Choices(autotune.Store(tmp_path / "empty"))
    assert [book.from_table(k, configs, folder).config.kwargs["BV"] for k in keys] == [32, 16]


def test_the_table_builder_times_anew_but_reuses_and_keeps_compiled_kernels(tmp_path):
    """`workbench tune`'s temporary cache: no choices of the user's cache reach it (everything is timed anew),
    but its compiled kernels are the user's (a kernel compiled by an earlier run is read, one compiled now is
    kept)."""
    from workbench.bench import tune

    user = tmp_path / "user"
    autotune.Store(user / "autotune").write(_key(), {"kwargs": {"BV": 64}})
    autotune.Store(user / "kernels").write({"kernel": "earlier"}, {"ptx": "earlier"})
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    tune.choices_only_cache(fresh, user)
    assert autotune.Store(fresh / "autotune").read(_key()) is None
    assert autotune.Store(fresh / "kernels").read({"kernel": "earlier"})["ptx"] == "earlier"
    autotune.Store(fresh / "kernels").write({"kernel": "now"}, {"ptx": "now"})
    assert autotune.Store(user / "kernels").read({"kernel": "now"})["ptx"] == "now"


def test_the_table_builder_takes_each_shape_once_at_the_head_dims_asked_for():
    from workbench.bench import specs, tune

    target = specs.OPS["chunk_kda"].shape_sets["target"][0]
    assert tune.shapes_of("chunk_kda", ["target"]) == [target]
    assert [(s["K"], s["V"]) for s in tune.shapes_of("chunk_kda", ["target", "target"], [64, target["K"], 64])] == [
        (64, 64), (target["K"], target["K"])]
    assert {s["D"] for s in tune.shapes_of("flash_attention", ["target"], [64, 256])} == {64, 256}
    with pytest.raises(ValueError, match="--shapes: recurrent has no shape set 'nope'"):
        tune.shapes_of("recurrent", ["nope"])
    sweep = specs.OPS["chunk_gla"].shape_sets["sweep"]
    longest = max(s["T"] for s in sweep)
    assert tune.shapes_of("chunk_gla", ["target", "sweep"], tokens=[longest]) == [
        s for s in sweep if s["T"] == longest]  # --T: the target's T is not the longest
    assert len(tune.shapes_of("chunk_gla", ["target", "sweep"], [64, 128], tokens=[longest])) == 2
    with pytest.raises(ValueError, match=r"--T: chunk_gla's sets sweep have no shape with T in \[7\]"):
        tune.shapes_of("chunk_gla", ["sweep"], tokens=[7])


def _stub_table_builder(monkeypatch, tmp_path, times, stop=None):
    """(`workbench.bench.tune`, a table folder) with `write_table`'s run stubbed: each shape tunes one key of its
    H and K as a kernel launch would, timed by `Timer(times)`; `stop` = (K, exception): that head dim raises it."""
    from workbench.bench import tune

    def run_once(op, shape, dtype, seed, passes):
        if stop is not None and shape["K"] == stop[0]:
            raise stop[1]
        store = autotune.Store(autotune.cache_dir() / "autotune")
        autotune.Choices(store).tune(_key(key_values={"H": shape["H"], "K": shape["K"]}), _configs(), Timer(times))

    monkeypatch.setattr(tune.launch, "INTERPRET", False)
    monkeypatch.setattr(tune, "_run_once", run_once)
    monkeypatch.setenv(autotune.CACHE_VAR, str(tmp_path / "user"))
    return tune, tmp_path / "table"


def test_the_table_builder_merges_the_shapes_that_ran_and_names_those_that_did_not(tmp_path, monkeypatch, capsys):
    """`write_table` with a stub run (tuning as a kernel launch would): a shape that raises costs only its own
    entries; the others are merged into the device's file, then `ShapesFailed` names the one that failed.
    A candidate that did not run where it was timed is named with its key and error."""
    times = {16: 2.0, 32: 1.0, 64: RuntimeError("too many resources")}
    tune, folder = _stub_table_builder(monkeypatch, tmp_path, times, stop=(256, RuntimeError("out of shared memory")))
    with pytest.raises(tune.ShapesFailed, match=r"1 shape\(s\) not tuned(.|\n)*K=256.*out of shared memory") as info:
        tune.write_table(["recurrent"], ["target"], head_dims=[32, 256, 128], folder=folder)
    entries = json.loads(info.value.path.read_text())
    assert info.value.path.parent == folder and len(info.value.failed) == 1
    said = capsys.readouterr()
    lost = [line for line in (said.out + said.err).splitlines() if "did not run" in line]
    assert len(lost) == 2 and all("'BV': 64" in line and "too many resources" in line for line in lost), lost
    assert {line.split("[")[1].split("]")[0] for line in lost} == {"H=16 K=32", "H=16 K=128"}
    assert sorted(e["key"]["K"] for e in entries) == [32, 128]  # not the target's own 64
    assert {e["config"]["kwargs"]["BV"] for e in entries} == {32}
    assert os.environ[autotune.CACHE_VAR] == str(tmp_path / "user")  # put back
    with pytest.raises(ValueError, match="--kernels: no_such_kernel not timed by any run of recurrent"):
        tune.write_table(["recurrent"], ["target"], head_dims=[32], kernels=["no_such_kernel"], folder=folder)
    assert autotune.REFRESH_VAR not in os.environ  # put back


def test_the_table_builder_says_each_choice_its_time_the_next_best_and_what_the_table_had(tmp_path, monkeypatch,
                                                                                          capsys):
    """Per choice: the config and its time, the next best and how much slower, and the table's choice for the key
    before the run (another config with its time here, the same one, or none). The retune of
    2026-11-29 that chose by the host would have shown at once: its 'chosen' times were the host's, far from the
    kernels' in the op, and every changed entry named."""
    from workbench import tuning_table

    tune, folder = _stub_table_builder(monkeypatch, tmp_path, {16: 2.0, 32: 1.0, 64: 4.0})
    device = jax.devices()[0].device_kind
    had = [tuning_table.entry_of(_key(key_values={"H": 16, "K": k}), autotune.config_fields(_configs()[i]))
           for k, i in ((32, 0), (64, 1))]  # K=32: BV=16 (to be replaced), K=64: BV=32 (kept)
    tuning_table.Table(device, had).write(folder)
    tune.write_table(["recurrent"], ["target"], head_dims=[32, 64, 128], folder=folder)
    said = capsys.readouterr()
    lines = {re.search(r"K=(\d+)", line).group(1): line for line in (said.out + said.err).splitlines()
             if " chose " in line}
    assert set(lines) == {"32", "64", "128"}
    for line in lines.values():
        assert "chose BV=32 w4 s2: 1.000 ms; next BV=16 w4 s2: 2.000 ms (+100 %)" in line, line
    assert "the table (table) had BV=16 w4 s2: 2.000 ms here" in lines["32"]
    assert "the table's (table) too" in lines["64"]
    assert "the table had none" in lines["128"]  # no entry at K=128, and K is not a size the nearest may stand in for


def test_the_table_builder_runs_the_passes_asked_for(tmp_path, monkeypatch):
    """`--passes`: each shape's run gets the passes asked for (both by default), and `_run_once` runs those and no
    other: the forward alone for a kernel only the forward launches, so its tune does not compile the backward.
    An unknown or empty list is a ValueError naming the argument before anything runs."""
    from workbench.bench import tune

    seen = []
    run_once = tune._run_once
    monkeypatch.setattr(tune.launch, "INTERPRET", False)
    monkeypatch.setattr(tune, "_run_once", lambda op, shape, dtype, seed, passes: seen.append(tuple(passes)))
    monkeypatch.setenv(autotune.CACHE_VAR, str(tmp_path / "user"))
    folder = tmp_path / "table"
    tune.write_table(["recurrent"], ["target"], head_dims=[32], folder=folder)
    tune.write_table(["recurrent"], ["target"], head_dims=[32, 64], passes=["forward"], folder=folder)
    assert seen == [("forward", "forward_backward"), ("forward",), ("forward",)]
    for bad in (["forward", "backward"], []):
        with pytest.raises(ValueError, match=r"--passes: expected a non-empty list of forward, forward_backward"):
            tune.write_table(["recurrent"], ["target"], passes=bad, folder=folder)
    assert len(seen) == 3

    ran = []

    class Calls:
        def forward(self):
            ran.append("forward")
            return jnp.zeros(3)

        def forward_backward(self):
            ran.append("forward_backward")
            return jnp.zeros(3)

        def block(self, out):
            return out

    monkeypatch.setattr(tune, "jax_calls", lambda op, implementation, inputs, cotangents: Calls())
    op = tune.OPS["recurrent"]
    shape = op.shape_sets["tiny"][0]
    run_once(op, shape, "float32", 0, ("forward",))
    assert ran == ["forward", "forward"]  # the first: the reference's, traced for the cotangents' shapes
    ran.clear()
    run_once(op, shape, "float32", 0)
    assert ran == ["forward", "forward", "forward_backward"]


def test_the_table_builder_precompiles_with_the_workers_asked_for(tmp_path, monkeypatch, capsys):
    """`--compile-workers N`: while the shapes run, one precompiler is installed that hands each kernel's
    candidates to `compile_check.precompile` with N workers and says what it did; none without the option, and
    none left after the run. A negative or non-integer count is a ValueError naming the argument."""
    from workbench.bench import tune

    installed, handed = [], []

    def run_once(op, shape, dtype, seed, passes):
        installed.append(len(autotune._PRECOMPILERS))
        for precompiler in autotune._PRECOMPILERS:
            precompiler(recurrent_kernels.recurrent_fwd_kernel, ["args"], ["outs"], _configs(), {"H": 2})

    def precompile(kernel, args, out_shapes, configs, metaparams, *, workers):
        handed.append((kernel, args, len(configs), workers))
        return {"compiled": len(configs) - 1, "skipped": 1, "failed": [], "seconds": 1.5}

    monkeypatch.setattr(tune.launch, "INTERPRET", False)
    monkeypatch.setattr(tune, "_run_once", run_once)
    monkeypatch.setattr(tune.compile_check, "precompile", precompile)
    monkeypatch.setenv(autotune.CACHE_VAR, str(tmp_path / "user"))
    folder = tmp_path / "table"
    tune.write_table(["recurrent"], ["target"], head_dims=[32], folder=folder)
    tune.write_table(["recurrent"], ["target"], head_dims=[32, 64], compile_workers=3, folder=folder)
    assert installed == [0, 1, 1] and autotune._PRECOMPILERS == []
    n = len(_configs())
    assert handed == [(recurrent_kernels.recurrent_fwd_kernel, ["args"], n, 3)] * 2
    said = capsys.readouterr()
    assert f"recurrent_fwd_kernel: precompiled {n - 1} of {n} candidates (1 on disk already) in 1.5 s with 3 workers" \
        in said.out + said.err
    for bad in (-1, 2.0, True):
        with pytest.raises(ValueError, match="--compile-workers: expected a count"):
            tune.write_table(["recurrent"], ["target"], compile_workers=bad, folder=folder)


def test_the_table_builder_keeps_the_shapes_it_finished_when_stopped(tmp_path, monkeypatch):
    """A tune stopped part way (here an interrupt in its third shape; on a GPU machine, a time limit) has already
    merged the choices of the shapes it finished into the device's file: one process can take every dtype and
    head dimension without risking them all (2026-11-29: six runs cut at 80 s each wrote nothing)."""
    tune, folder = _stub_table_builder(monkeypatch, tmp_path, {16: 2.0, 32: 1.0, 64: 3.0},
                                       stop=(128, KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        tune.write_table(["recurrent"], ["target"], head_dims=[32, 64, 128, 256], folder=folder)
    (path,) = folder.glob("*.json")
    entries = json.loads(path.read_text())
    assert sorted(e["key"]["K"] for e in entries) == [32, 64]  # the two shapes before the interrupt
    assert {e["config"]["kwargs"]["BV"] for e in entries} == {32}


def test_the_default_mode_launches_the_table_config_untimed(cache_dir, tmp_path, monkeypatch):
    """Through `autotune.call` (stub launcher and timer): the default mode takes the table's config without
    timing; WORKBENCH_AUTOTUNE=on times the candidates as before."""
    launcher = Launcher()
    timer = lambda config, run: pytest.fail("the table's config needs no timing")  # noqa: E731
    args = _arrays()
    p = autotune.plan(recurrent_kernels.recurrent_fwd_kernel, args, _recurrent_call()[1], _recurrent_call()[2],
                      device="NVIDIA H100", versions=autotune.versions(), grid=(1,))  # _gpu_call's grid
    assert len(p.candidates) > 1
    monkeypatch.setenv(autotune.TABLE_VAR, str(_table_dir(tmp_path, [_entry(p.key, p.candidates[-1])])))
    _gpu_call(args, launcher, timer, tune_inputs={"cu_seqlens": CU})
    assert autotune.STATS["chosen_table"] == 1 and "chosen_tuned" not in autotune.STATS
    assert launcher.launches[-1]["num_warps"] == p.candidates[-1].num_warps
    chosen = {"kernel": "recurrent_fwd_kernel", "key": p.key["key"], "source": "table",
              "config": autotune.config_fields(p.candidates[-1])}
    assert list(autotune.CHOSEN.values()) == [chosen]  # what a bench record lists
    monkeypatch.setattr(autotune, "_CHOICES", {})
    monkeypatch.setattr(autotune, "CHOSEN", {})
    monkeypatch.setenv(autotune.MODE_VAR, "on")
    timed = []
    _gpu_call(args, launcher, lambda config, run: timed.append(config) or 1.0, tune_inputs={"cu_seqlens": CU})
    assert len(timed) == len(p.candidates) * (1 + autotune.CONFIRM_ROUNDS) and autotune.STATS["chosen_tuned"] == 1  # all tie
    _gpu_call(args, launcher, timer, tune_inputs={"cu_seqlens": CU})  # the same key again: from memory
    assert autotune.STATS["chosen_memory"] == 1
    tuned = {**chosen, "source": "tuned", "config": autotune.config_fields(p.candidates[0])}
    assert list(autotune.CHOSEN.values()) == [tuned]  # where the choice first came from


def test_a_refresh_limited_to_other_kernels_takes_the_table_untimed(cache_dir, tmp_path, monkeypatch):
    """WORKBENCH_AUTOTUNE=refresh with WORKBENCH_AUTOTUNE_REFRESH naming another kernel: this one takes the
    table's config without timing (as after a change to the other kernel alone, `workbench tune --kernels`);
    naming this kernel, or naming none, times it again."""
    launcher = Launcher()
    args = _arrays()
    p = autotune.plan(recurrent_kernels.recurrent_fwd_kernel, args, _recurrent_call()[1], _recurrent_call()[2],
                      device="NVIDIA H100", versions=autotune.versions(), grid=(1,))
    monkeypatch.setenv(autotune.TABLE_VAR, str(_table_dir(tmp_path, [_entry(p.key, p.candidates[-1])])))
    monkeypatch.setenv(autotune.MODE_VAR, "refresh")
    monkeypatch.setenv(autotune.REFRESH_VAR, "chunk_dqkg_kernel, recurrent_bwd_kernel")
    _gpu_call(args, launcher, lambda config, run: pytest.fail("not this kernel's refresh"), tune_inputs={"cu_seqlens": CU})
    assert autotune.STATS["chosen_table"] == 1 and launcher.launches[-1]["num_warps"] == p.candidates[-1].num_warps
    for names in ("recurrent_fwd_kernel", ""):
        monkeypatch.setattr(autotune, "_CHOICES", {})
        monkeypatch.setenv(autotune.REFRESH_VAR, names)
        timed = []
        _gpu_call(args, launcher, lambda config, run: timed.append(config) or 1.0, tune_inputs={"cu_seqlens": CU})
        assert len(timed) >= len(p.candidates), names


SHIPPED_TABLE_CHECK = """
import importlib, json, pkgutil, sys
import workbench  # first: WORKBENCH_INTERPRET=0 keeps Triton compiled, as on a GPU (no GPU is needed to hash)
import triton
from triton.runtime.autotuner import Autotuner, Heuristics
from workbench import autotune, tuning_table

from triton.runtime.jit import JITFunction

kernels, every = [], 0
for info in pkgutil.walk_packages(workbench.__path__, "workbench."):
    if info.name.startswith("workbench.bench") or info.name.endswith("__main__"):
        continue
    module = importlib.import_module(info.name)
    for value in vars(module).values():
        if isinstance(value, JITFunction):  # every kernel and helper hashes (the kernel cache keys them all)
            autotune.source_hash(value)
            every += 1
        if isinstance(value, Autotuner):
            fn = value.fn
            while isinstance(fn, Heuristics):  # the jitted function under the heuristics, as the launcher keys it
                fn = fn.fn
            kernels.append(fn)
if sys.argv[1:] == ["reverse"]:  # Triton's own keys computed first, in the other order: ours must not notice
    kernels.reverse()
    for fn in kernels:
        fn.cache_key
hashes = {}
for fn in kernels:
    hashes.setdefault(autotune.function_name(fn), set()).add(autotune.source_hash(fn))
stale = []
for path in sorted(tuning_table.FOLDER.glob("*.json")):
    for e in json.loads(path.read_text()):
        if e["source"] not in hashes.get(e["kernel"], ()):
            stale.append(f"{path.name}: {e['kernel']} {json.dumps(e['key'], sort_keys=True)}")
print(json.dumps({"hashes": {k: sorted(v) for k, v in hashes.items()}, "stale": stale, "jit_functions": every}))
"""


def _compiled_mode(script, *args, cwd=None):
    """Run `script` in a process with Triton compiled (WORKBENCH_INTERPRET=0; hashing needs no GPU); its
    last stdout line as JSON."""
    env = {**os.environ, "WORKBENCH_INTERPRET": "0", "TRITON_INTERPRET": "0"}
    result = subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True, text=True,
                            timeout=300, cwd=cwd or Path(__file__).resolve().parents[1])
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_the_shipped_tables_entries_serve_the_current_kernels():
    """Every entry of every table file in workbench/tuning/ names an autotuned kernel of the package with
    its current source hash (`source_hash` of the compiled-mode function, computed without a GPU in a
    process with WORKBENCH_INTERPRET=0): an entry made for older kernel text would be ignored at run time
    (one warning) and is dead weight. After changing a kernel, rebuild its entries on each GPU kind
    (`workbench tune --write-table`) or delete them (that kernel is then timed on first use). An entry tuned
    with another Triton release serves until one of this release replaces it (tuning_table)."""
    found = _compiled_mode(SHIPPED_TABLE_CHECK)
    assert len(found["hashes"]) >= 20, found  # the walk found the package's autotuned kernels
    assert found["jit_functions"] >= 50, found["jit_functions"]  # and hashed every @triton.jit function
    assert not found["stale"], "stale tuning-table entries:\n" + "\n".join(found["stale"])


def test_a_kernels_source_hash_does_not_depend_on_what_was_hashed_before():
    """The same hashes when the kernels are hashed in the other order after Triton computed its own keys
    in that order (Triton 3.6's `cache_key` of chunk_kda's prep kernel changes then: `source_hash`)."""
    forward, reverse = _compiled_mode(SHIPPED_TABLE_CHECK), _compiled_mode(SHIPPED_TABLE_CHECK, "reverse")
    assert forward["hashes"] == reverse["hashes"] and forward["jit_functions"] == reverse["jit_functions"]
    assert all(len(v) == 1 for v in forward["hashes"].values())  # one text per kernel name


HASHED_MODULE = """
import triton
import triton.language as tl

import helpers

SCALE = tl.constexpr({scale})


@triton.jit
def twice(x):
    return x * {factor}


@triton.jit
def kernel(x_ptr):
    x = tl.load(x_ptr)
    tl.store(x_ptr, helpers.plus_one(twice(x)) * SCALE)
"""

HASHED_HELPERS = """
import triton


@triton.jit
def plus_one(x):
    return x + {one}
"""

HASH_OF_KERNEL = """
import json, sys
sys.path.insert(0, sys.argv[1])
import workbench
import kernels
from workbench import autotune
print(json.dumps(autotune.source_hash(kernels.kernel)))
"""


@pytest.mark.parametrize("change", ["none", "helper by name", "helper by module attribute", "constexpr global"])
def test_a_kernels_source_hash_follows_its_helpers_and_constexpr_globals(tmp_path, change):
    """A kernel's hash changes with the text of a helper it calls by name or as `module.helper`, and with
    the value of a constexpr global it reads; the same text hashes the same in another process."""
    def write(folder, factor=2, one=1, scale=3):
        folder.mkdir()
        (folder / "kernels.py").write_text(HASHED_MODULE.format(factor=factor, scale=scale))
        (folder / "helpers.py").write_text(HASHED_HELPERS.format(one=one))
        return _compiled_mode(HASH_OF_KERNEL, str(folder))

    base = write(tmp_path / "a")
    other = write(tmp_path / "b", **{"none": {}, "helper by name": {"factor": 4},
                                     "helper by module attribute": {"one": 2},
                                     "constexpr global": {"scale": 5}}[change])
    assert (base == other) == (change == "none"), (change, base, other)


def _table_answers(table, op_name: str, shape_set: str, dtype: str, head_dims=()) -> list:
    """Trace the op's Triton forward alone and forward+backward at the bench shape set (at `head_dims` if
    given, as `workbench tune --head-dims`), abstractly on the CPU (nothing runs), and ask `table` for each
    autotuned launch of more than one candidate: one (kernel, key values, `Table.choose`'s answer) per
    launch. Keys as the GPU launcher makes them (`autotune.plan` with the launch's grid); the source hash is
    the entries' (`test_the_shipped_tables_entries_serve_the_current_kernels` holds those to the kernels)."""
    from triton.runtime.autotuner import Autotuner

    from workbench.bench.specs import OPS
    from workbench.bench.tune import shapes_of

    seen = []
    with launch.observing(seen.append):
        for shape in shapes_of(op_name, [shape_set], head_dims):
            OPS[op_name].trace(shape, dtype)
    sibling = table.sibling.entries if table.sibling is not None else []
    sources = {e["kernel"]: e["source"] for e in [*sibling, *table.entries]}  # its own kind's first
    out = []
    for launched in seen:
        if not isinstance(launched.kernel, Autotuner):
            continue
        p = autotune.plan(launched.kernel, launched.args, launched.out_shapes, launched.metaparams,
                          grid=launched.grid, device=table.device, versions={"triton": triton.__version__})
        if len(p.candidates) > 1:
            out.append((p.key["kernel"], p.key["key"], table.choose(
                {**p.key, "source": sources.get(p.key["kernel"])}, [autotune.config_fields(c) for c in p.candidates])))
    return out


GRID = [(op, dtype, k) for op in ("recurrent", "chunk_gla", "chunk_kda") for dtype in ("bfloat16", "float16", "float32")
        for k in (64, 128, 256) if (op, dtype, k) != ("chunk_gla", "float32", 256)]  # that one does not run


def _shipped_table(device):
    """The package's table of a GPU kind with its sibling's, as the launcher reads them (`tuning_table.table_for`)."""
    from workbench import tuning_table

    return tuning_table.Table.load(device, sibling=tuning_table.Table.load(tuning_table.SIBLINGS[device]))


def _served_by_sibling_in_readme() -> dict[str, set[str]]:
    """workbench/tuning/README.md, "Served by the sibling kind": GPU kind → kernel names ("none": empty)."""
    text = (Path(__file__).resolve().parents[1] / "workbench" / "tuning" / "README.md").read_text()
    section = text.split("## Served by the sibling kind", 1)[1].split("\n## ", 1)[0]
    out = {}
    for kind, names in re.findall(r"^- `([^`]+)`: (.+)$", section, flags=re.M):
        out[kind] = set() if names.strip() == "none" else {n.strip(" `.") for n in names.split(",")}
    return out


def _answered_by_nearest_in_readme() -> dict[str, set[tuple]]:
    """workbench/tuning/README.md, "Answered by the nearest entry": GPU kind → {(op, shape set, kernel,
    programs)} of the bench launches its table answers from a nearest entry ("none": empty)."""
    text = (Path(__file__).resolve().parents[1] / "workbench" / "tuning" / "README.md").read_text()
    section = text.split("## Answered by the nearest entry", 1)[1].split("\n## ", 1)[0]
    out = {}
    for kind, items in re.findall(r"^- `([^`]+)`: (.+)$", section, flags=re.M):
        out[kind] = set()
        for item in ([] if items.strip() == "none" else items.split(";")):
            op, shape_set, kernel, programs = item.split()
            out[kind].add((op, shape_set, kernel.strip("`"), int(programs)))
    return out


@pytest.mark.parametrize("device", ["NVIDIA H100 80GB HBM3", "NVIDIA H200"])
def test_the_shipped_tables_cover_the_grid_of_dtypes_and_head_dims(device):
    """workbench/tuning/README.md's grid: on each GPU kind, every autotuned launch of each op's target shape
    (chunk_kda's `wide` set at K = 256) in bfloat16, float16 and float32 at K = V = 64, 128 and 256 is answered
    by an entry made at that key, chunk_gla in float32 at 256 excepted: the kind's own ("table"), or for a kernel
    the kind has not been tuned for since it changed, the sibling kind's ("table_sibling"). The kernels served so
    are exactly those the README lists for the kind, so a kind's debt of tuning is written down, never silent."""
    table = _shipped_table(device)
    missing, by_sibling, answered = [], set(), 0
    for op_name, dtype, k in GRID:
        shape_set = "wide" if op_name == "chunk_kda" and k == 256 else "target"
        for kernel, _, found in _table_answers(table, op_name, shape_set, dtype, [k]):
            answered += 1
            if found is None or found[1] not in ("table", "table_sibling"):
                missing.append((op_name, dtype, k, kernel, found and found[1]))
            elif found[1] == "table_sibling":
                by_sibling.add(kernel)
    assert not missing, missing
    assert answered >= 3 * len(GRID), answered
    assert by_sibling == _served_by_sibling_in_readme()[device], (device, sorted(by_sibling))


@pytest.mark.parametrize("device,op_name", [(device, op) for device in ("NVIDIA H100 80GB HBM3", "NVIDIA H200")
                                             for op in ("recurrent", "chunk_gla", "chunk_kda")])
def test_the_shipped_tables_serve_every_bench_launch_without_timing(device, op_name):
    """The GPU kind's table answers every autotuned launch of the op's bench shapes from an entry made at
    that key (`target`, `sweep` and chunk_kda's `wide`: "table") and every launch of `off_table` (T = 3000,
    H = 12) from the nearest one, its own or, for a kernel not tuned on it since it changed, the sibling kind's:
    a first call there times nothing (`_table_answers`)."""
    from workbench.bench.specs import OPS

    table = _shipped_table(device)
    listed = {item for item in _answered_by_nearest_in_readme()[device] if item[0] == op_name}
    by_nearest = set()
    sets = [("target", "table"), ("sweep", "table"), ("off_table", "table_nearest")]
    sets += [("wide", "table")] if "wide" in OPS[op_name].shape_sets else []
    for shape_set, want in sets:
        answers = collections.Counter()
        for kernel, key, found in _table_answers(table, op_name, shape_set, "bfloat16"):
            answers[found and found[1]] += 1
            item = (op_name, shape_set, kernel, key["programs"])
            if want == "table" and found is not None and found[1].endswith("nearest") and item in listed:
                by_nearest.add(item)
                continue
            assert found is not None and found[1] in (want, want.replace("table", "table_sibling", 1)), (
                shape_set, kernel, key, found)
        assert sum(answers.values()) >= 2, answers
    assert by_nearest == listed, ("tuning README, 'Answered by the nearest entry'", device, sorted(by_nearest),
                                  sorted(listed))
