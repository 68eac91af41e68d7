"""Where `validate --exact` finds etcd, kube-apiserver and the operators' managers, and the one line it says when it
finds no server."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from kubetrain.cli.main import cli
from kubetrain.jobs.localapi import ServerBinariesMissing, find_binaries
from kubetrain.jobs.localwebhooks import find_manager_binary, manager_for


def _binaries(directory: Path) -> Path:
    directory.mkdir(parents=True)
    for name in ("etcd", "kube-apiserver"):
        (directory / name).write_text("#!/bin/sh\n")
        (directory / name).chmod(0o755)
    return directory


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("KUBEBUILDER_ASSETS", "KUBETRAIN_TESTENV_CACHE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("KUBETRAIN_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path


def test_envtest_store_newest_patch_of_the_minor(home: Path) -> None:
    store = home / "data" / "kubebuilder-envtest" / "k8s"
    _binaries(store / "1.36.0-linux-amd64")
    newest = _binaries(store / "1.36.2-linux-amd64")
    _binaries(store / "1.35.9-linux-amd64")
    assert find_binaries(None, "1.36") == newest


def test_kubebuilder_assets_before_the_store_and_the_flag_before_both(home: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    _binaries(home / "data" / "kubebuilder-envtest" / "k8s" / "1.36.0-linux-amd64")
    assets = _binaries(home / "assets")
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(assets))
    assert find_binaries(None, "1.36") == assets
    flag = _binaries(home / "flag")
    assert find_binaries(str(flag), "1.36") == flag


def test_the_test_environments_cache(home: Path) -> None:
    built = _binaries(home / "xdg" / "kubetrain" / "testenv" / "v1.36.3" / "bin")
    assert find_binaries(None, "v1.36") == built


def test_none_found_is_one_line_that_says_how_to_get_them(home: Path) -> None:
    with pytest.raises(ServerBinariesMissing) as caught:
        find_binaries(None, "1.36")
    assert "\n" not in str(caught.value)
    assert "--server-binaries" in str(caught.value) and "setup-envtest use 1.36.x" in str(caught.value)
    with pytest.raises(ServerBinariesMissing, match=r"--server-binaries .*needs executable etcd and kube-apiserver"):
        find_binaries(str(home / "nowhere"), "1.36")


def test_cli_exits_2_with_that_line(home: Path) -> None:
    manifest = home / "cm.yaml"
    manifest.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n")
    result = CliRunner().invoke(cli, ["validate", "--exact", str(manifest)])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines()[-1].startswith("error: validate --exact: no etcd and kube-apiserver")
    assert "Traceback" not in result.output


def test_the_operators_managers_beside_the_server_binaries_first(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    servers = _binaries(home / "servers")
    assets = _binaries(home / "assets")
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(assets))
    (assets / "training-operator").write_text("#!/bin/sh\n")
    (assets / "training-operator").chmod(0o755)
    assert find_manager_binary("training-operator", None, "1.36", str(servers)) == assets / "training-operator"
    (servers / "training-operator").write_text("#!/bin/sh\n")
    (servers / "training-operator").chmod(0o755)
    assert find_manager_binary("training-operator", None, "1.36", str(servers)) == servers / "training-operator"
    assert find_manager_binary("jobset", None, "1.36", str(servers)) is None


def test_each_kind_to_the_operator_whose_webhooks_admit_it() -> None:
    assert [m and m.name for m in (manager_for("kubeflow.org/v1", "PyTorchJob"),
                                   manager_for("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime"),
                                   manager_for("jobset.x-k8s.io/v1alpha2", "JobSet"), manager_for("v1", "Pod"),
                                   manager_for("kubeflow.org/v1", "TFJob"))] == \
        ["training-operator", "trainer", "jobset", None, None]
