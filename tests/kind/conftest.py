"""Fixtures for `kubetrain cluster` tests: a fake GPU host (nvidia-smi, docker, nvidia-ctk, kind, kubectl,
helm) made of recording fakes (tests/imagebuild/recording.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

_RECORDING = Path(__file__).parents[1] / "imagebuild" / "recording.py"
_spec = importlib.util.spec_from_file_location("recording", _RECORDING)
assert _spec and _spec.loader
recording = sys.modules.get("recording") or importlib.util.module_from_spec(_spec)
if "recording" not in sys.modules:
    sys.modules["recording"] = recording
    _spec.loader.exec_module(recording)
FakeBin = recording.FakeBin


@pytest.fixture
def fakebin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    fake = FakeBin(tmp_path / "bin")
    recording.activate(fake, monkeypatch)
    return fake
