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
