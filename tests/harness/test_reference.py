"""The upstream CRDs come from the pinned Go modules and match kubetrain's sha256 pins."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kubetrain.validate.fetch import PINNED
from tests.testenv import reference


def test_every_pinned_crd_is_there_and_intact(reference_dir: Path) -> None:
    files = reference.pinned_files(reference_dir)
    assert len(files) == len(PINNED)
    assert reference.verify(reference_dir) == reference_dir
    assert "shared" not in reference_dir.parts  # taken from the module cache, not from beside the clone


def test_a_changed_crd_fails_and_a_missing_one_is_named(reference_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "reference"
    shutil.copytree(reference_dir, copy)
    crd = reference.pytorchjob_crd(copy)
    crd.write_bytes(crd.read_bytes().replace(b"PyTorchJob", b"PyTorchJub", 1))
    with pytest.raises(reference.ReferenceMismatch, match="does not match kubetrain's pin"):
        reference.verify(copy)
    crd.unlink()
    with pytest.raises(reference.ReferenceMissing, match=r"kubeflow\.org_pytorchjobs\.yaml is missing"):
        reference.verify(copy)
