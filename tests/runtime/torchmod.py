"""Import torch for a test module: skipped without torch locally, a hard failure under CI=true."""

from __future__ import annotations

import importlib
from types import ModuleType

import pytest

from tests.conftest import in_ci


def require_torch() -> ModuleType:
    if in_ci():
        return importlib.import_module("torch")
    return pytest.importorskip("torch")
