"""tests/runtime: real torch, real torchrun, real processes (gloo on CPU).

Tests marked `torch` need the runtime extra. Without torch they are skipped locally, but under CI=true a
missing torch is a failure: CI must install `.[runtime,examples]`.
"""

from __future__ import annotations

import importlib.util

import pytest

from tests.conftest import in_ci


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("torch") and importlib.util.find_spec("torch") is None:
        if in_ci():
            pytest.fail("torch is not installed but CI=true: install the extras (pip install -e '.[runtime,examples]')")
        pytest.skip("torch is not installed (pip install -e '.[runtime,examples]')")
