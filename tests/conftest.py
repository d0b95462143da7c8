"""Test setup: float64 available for oracles, Hypothesis profile, GPU-only marker."""

import jax
import pytest

import workbench  # noqa: F401  (first: decides compiled vs interpreted Triton)
from workbench import launch
from workbench.strategies import load_profile

jax.config.update("jax_enable_x64", True)
PROFILE = load_profile()


def pytest_report_header(config):
    mode = "interpreter (CPU)" if launch.INTERPRET else "compiled (CUDA)"
    return f"workbench: Triton {mode}; hypothesis profile {PROFILE}; jax {jax.__version__}"


def pytest_collection_modifyitems(config, items):
    if launch.INTERPRET:
        skip = pytest.mark.skip(reason="needs a CUDA GPU: Triton runs in the interpreter on this machine")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


@pytest.fixture(scope="module")
def ieee_float32():
    """Full float32 matmuls in every JAX computation (no TF32/bf16 passes), as a float64 oracle
    comparison assumes; property modules use it with `pytestmark = pytest.mark.usefixtures(...)`."""
    with jax.default_matmul_precision("float32"):
        yield
