"""Helpers shared by the test modules of every family."""

import re

import pytest


def raises(argument, *shown):
    """pytest.raises for a ValueError whose message starts with `argument:` and shows `shown`."""
    pattern = rf"^{re.escape(argument)}:" + "".join(rf"(?s:.*){re.escape(str(s))}" for s in shown)
    return pytest.raises(ValueError, match=pattern)


def distinct_configs(kernel):
    """{block sizes: index of the kernel's first autotune config with them}. Triton's interpreter runs a
    config's block sizes (its kwargs) and nothing else: configs that differ only in num_warps or
    num_stages run the same program there, so a CPU test of every config runs one of each."""
    from workbench import launch

    distinct = {}
    for index, config in enumerate(launch.autotune_configs(kernel)):
        distinct.setdefault(tuple(sorted(config.kwargs.items())), index)
    return distinct


def assert_fits_hopper(row, config, *, stack, barriers):
    """A `compile_check` "resources" row of a Gluon launch: compiled under the register cap its `config` asks,
    with Hopper's wgmma (no mma.sync), within a block's shared memory, at most `stack` spilled bytes, and its
    named `barriers` all there with every other BAR of the cubin (Triton's partitions) on a lower id."""
    from workbench import compile_check

    usage = row["resources"]
    assert row["spec"]["maxnreg"] == config["maxnreg"]
    assert usage["HGMMA"] > 0 and usage["HMMA"] == 0, usage
    assert usage["registers"] <= config["maxnreg"], usage
    assert usage["shared"] <= compile_check.SHARED_LIMIT, usage
    assert usage["stack"] <= stack, usage
    assert set(barriers) <= set(usage["named_barriers"]), usage
    assert max(set(usage["named_barriers"]) - set(barriers)) < min(barriers), usage
