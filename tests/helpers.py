"""Helpers shared by the test modules of every family."""

import re

import pytest


def raises(argument, *shown):
    """pytest.raises for a ValueError whose message starts with `argument:` and shows `shown`."""
    pattern = rf"^{re.escape(argument)}:" + "".join(rf"(?s:.*){re.escape(str(s))}" for s in shown)
    return pytest.raises(ValueError, match=pattern)
