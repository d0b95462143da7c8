"""The multi-device notebooks run where a researcher opens them (issue 46): on every GPU when there are two or
more, else on the host CPU's devices with Triton interpreted (`WORKBENCH_MIN_GPUS`), sized from the devices
present. nbmake runs them with their default (4 host devices); here they run again with 2, and the choice
between GPUs and host devices is checked for 0, 1 and 2 visible GPUs (the count a one-GPU machine gives)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from workbench import _backend

ROOT = Path(__file__).resolve().parents[1]
MULTI_DEVICE = ("sharding", "ring_attention")


@pytest.mark.parametrize("nodes, listed, expected", [
    (["nvidia0", "nvidiactl", "nvidia-uvm", "null"], None, 1),
    (["nvidia0", "nvidia1", "nvidiactl"], None, 2),
    (["nvidia0", "nvidia1"], "1", 1),
    (["nvidia0", "nvidia1"], "0,1,2,3", 2),
    (["nvidia0", "nvidia1"], "", 0),
    (["nvidia0", "nvidia1"], "-1", 0),
    (["null", "nvidiactl"], None, 0),
])
def test_visible_gpus_are_counted_without_jax(nodes, listed, expected):
    assert _backend.visible_gpus(nodes, listed) == expected


def test_fewer_gpus_than_asked_means_the_host_cpu():
    assert [_backend.host_instead("2", n) for n in (0, 1, 2, 3)] == [True, True, False, False]
    assert not _backend.host_instead(None, 0) and not _backend.host_instead("", 0)
    with pytest.raises(ValueError, match="WORKBENCH_MIN_GPUS: expected a whole number of GPUs, got 'two'"):
        _backend.host_instead("two", 1)


def test_min_gpus_sends_jax_to_the_host_cpu_when_imported():
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "WORKBENCH_INTERPRET", "TRITON_INTERPRET")}
    env.update(WORKBENCH_MIN_GPUS=str(_backend.visible_gpus() + 1), PYTHONPATH=str(ROOT))
    code = "import os, workbench; print(workbench.INTERPRET, os.environ['JAX_PLATFORMS'])"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "cpu"]


@pytest.mark.parametrize("notebook", MULTI_DEVICE)
def test_a_multi_device_notebook_sizes_itself_from_the_devices_present(notebook):
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "WORKBENCH_INTERPRET", "TRITON_INTERPRET",
                                                            "WORKBENCH_MIN_GPUS")}
    env["XLA_FLAGS"] = " ".join([env.get("XLA_FLAGS", ""), "--xla_force_host_platform_device_count=2"])
    env["MPLBACKEND"] = "Agg"
    done = subprocess.run([sys.executable, f"{notebook}.py"], cwd=ROOT / "notebooks", env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "2 host CPU devices (this machine has fewer than 2 GPUs); Triton in the interpreter" in done.stdout
