"""Connecting without the kubernetes package: kubeconfig merging, credentials, timeouts, auth plugins.

Real sockets and real processes: a server that accepts and never answers (a hung API server's `status`),
the scripted fake API recording what it is sent, and exec auth plugins that are shell scripts — the
legitimate fake for gke-gcloud-auth-plugin / aws / kubelogin, which cannot run here.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from kubetrain.cli.main import cli
from kubetrain.errors import ClusterError
from kubetrain.kube import kubeconfig
from kubetrain.kube.connection import connect
from kubetrain.kube.errors import AuthPluginError, Unreachable
from tests.testenv.fakeapi import Answer, FakeApi


def write_kubeconfig(path: Path, server: str, user: dict[str, Any], context: str = "test",
                     namespace: str | None = None) -> Path:
    ctx: dict[str, Any] = {"cluster": "c", "user": "u", **({"namespace": namespace} if namespace else {})}
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": context,
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": context, "context": ctx}]}))
    return path


@pytest.fixture
def silent_server() -> Iterator[str]:
    """Accepts connections and never answers (what a hung API server does)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    held: list[Any] = []
    stop = threading.Event()

    def accept() -> None:
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(sock.accept())
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"127.0.0.1:{sock.getsockname()[1]}"
    stop.set()
    thread.join(2)
    sock.close()


API_RESOURCES = Answer(200, {"kind": "APIResourceList", "resources": []})


@pytest.fixture
def recorder(fake_api: FakeApi) -> str:
    """The fake API answering every request with an empty resource list; fake_api.seen has the requests."""
    fake_api.otherwise(API_RESOURCES)
    return fake_api.url


def plugin(tmp_path: Path, name: str, script: str) -> Path:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)
    return path


EXEC_TOKEN = """cat <<'EOF'
{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": {"token": "from-plugin"}}
EOF
"""
GCLOUD_NOT_LOGGED_IN = """echo 'ERROR: gcloud crashed (RefreshError): Reauthentication failed. cannot prompt during \
non-interactive execution.' >&2
for i in 1 2 3 4 5 6 7 8 9 10 11 12 13; do echo "noise line $i" >&2; done
exit 1
"""


# ---- a server that never answers ----------------------------------------------------------------------
def test_a_hung_server_times_out_with_exit_3(tmp_path: Path, silent_server: str) -> None:
    config = write_kubeconfig(tmp_path / "kc", f"https://{silent_server}", {"token": "t"})
    started = time.monotonic()
    result = CliRunner().invoke(cli, ["status", "x", "--kubeconfig", str(config), "--request-timeout", "2s"])
    took = time.monotonic() - started
    assert result.exit_code == 3, result.output
    assert f"error: https://{silent_server} did not answer within 2s" in result.stderr
    assert took < 30  # bounded: 2 s per request, not forever (generous for a loaded machine)


def test_the_default_request_timeout_applies_without_the_flag(tmp_path: Path, silent_server: str) -> None:
    config = write_kubeconfig(tmp_path / "kc", f"http://{silent_server}", {"token": "t"})
    connection = connect(kubeconfig=str(config))
    assert connection.rest.request_timeout == 30.0
    fast = connect(kubeconfig=str(config), request_timeout=0.5)
    with pytest.raises(Unreachable, match=r"did not answer within 0\.5s"):
        fast.rest.get("/version")


def test_a_refused_connection_is_exit_3_not_1(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = write_kubeconfig(tmp_path / "kc", f"https://127.0.0.1:{port}", {"token": "t"})
    result = CliRunner().invoke(cli, ["list", "--kubeconfig", str(config)])
    assert result.exit_code == 3
    assert result.stderr == f"error: cannot reach https://127.0.0.1:{port}: is the cluster running? " \
                            "(kubectl cluster-info)\n"


# ---- exec auth plugins ---------------------------------------------------------------------------------
def test_a_failing_login_plugin_is_named_with_its_first_line(tmp_path: Path, recorder: str,
                                                             fake_api: FakeApi) -> None:
    command = plugin(tmp_path, "gke-gcloud-auth-plugin", GCLOUD_NOT_LOGGED_IN)
    config = write_kubeconfig(tmp_path / "kc", recorder, {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1beta1", "command": str(command),
        "installHint": "Install gke-gcloud-auth-plugin", "provideClusterInfo": True}})
    result = CliRunner().invoke(cli, ["status", "x", "--kubeconfig", str(config)])
    assert result.exit_code == 3
    lines = result.stderr.splitlines()
    assert len(lines) == 1, lines  # not 14 lines of plugin noise
    assert lines[0].startswith(f"error: kubeconfig user u: auth plugin {command} failed: process returned 1: "
                               "ERROR: gcloud crashed (RefreshError): Reauthentication failed.")
    assert "RBAC" not in lines[0] and "anonymous" not in lines[0]
    assert fake_api.seen == []  # no anonymous request was made


def test_a_missing_login_plugin_says_how_to_install_it(tmp_path: Path) -> None:
    config = write_kubeconfig(tmp_path / "kc", "https://127.0.0.1:1", {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1beta1", "command": "kubelogin-not-installed",
        "installHint": "Install kubelogin: https://azure.github.io/kubelogin"}})
    with pytest.raises(AuthPluginError) as caught:
        connect(kubeconfig=str(config))
    assert str(caught.value) == ("kubeconfig user u: auth plugin kubelogin-not-installed is not installed (not on "
                                 "PATH): Install kubelogin: https://azure.github.io/kubelogin")


def test_a_working_plugin_token_is_sent_as_bearer(tmp_path: Path, recorder: str, fake_api: FakeApi) -> None:
    command = plugin(tmp_path, "aws-token", EXEC_TOKEN)
    config = write_kubeconfig(tmp_path / "kc", recorder, {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1", "command": str(command)}})
    result = CliRunner().invoke(cli, ["list", "--kubeconfig", str(config)])
    assert result.exit_code == 0, result.stderr  # the recorder answers every GET with an empty list
    assert fake_api.seen and all(s.headers["authorization"] == "Bearer from-plugin" for s in fake_api.seen)
    assert fake_api.seen[0].headers["user-agent"].startswith("kubetrain/")


# ---- kubeconfig ----------------------------------------------------------------------------------------
def test_kubeconfig_list_merges_first_wins_and_resolves_relative_paths(tmp_path: Path, monkeypatch: Any) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "token").write_text("tok-a\n")
    first = write_kubeconfig(tmp_path / "a" / "kc", "https://first:6443", {"tokenFile": "token"}, namespace="ml")
    second = write_kubeconfig(tmp_path / "kc2", "https://second:6443", {"token": "b"}, context="other")
    monkeypatch.setenv("KUBECONFIG", f"{first}:{tmp_path / 'missing'}:{second}")
    endpoint = kubeconfig.load()
    assert endpoint is not None
    assert (endpoint.server, endpoint.context, endpoint.namespace) == ("https://first:6443", "test", "ml")
    assert endpoint.token_file == str(tmp_path / "a" / "token")
    other = kubeconfig.load(context="other")
    assert other is not None and other.server == "https://first:6443"  # cluster "c": the first file's wins
    with pytest.raises(ClusterError, match=r"--context nope: no such context in the kubeconfig \(have: test, other\)"):
        kubeconfig.load(context="nope")


def test_status_list_and_logs_do_not_import_the_kubernetes_package_nor_urllib3() -> None:
    """The start-up budget (docs/performance.md) depends on it: the imports alone cost 0.6-1.5 s and ~95 ms.
    (tests/cli/test_logs_gpu_doctor_cli.py runs the commands themselves against the test control plane.)"""
    code = ("import sys; from kubetrain.cli import status_cmd, logs_cmd; from kubetrain.jobs import status, logs, "
            "crud, logstream, timing; from kubetrain.kube import connection, watch, events, rest, transport; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('kubernetes', 'urllib3')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# ---- a URL that is no Kubernetes API server -------------------------------------------------------------
@pytest.mark.parametrize("command", [["status", "x"], ["list"], ["logs", "x"]])
def test_a_server_that_answers_404_everywhere_is_not_called_a_missing_crd(tmp_path: Path, fake_api: FakeApi,
                                                                            command: list[str]) -> None:
    fake_api.otherwise(Answer(404, "404 page not found\n"))  # a wrong URL or a proxy path: Go's plain-text 404
    url = fake_api.url
    config = write_kubeconfig(tmp_path / "kc", url, {"token": "t"})
    result = CliRunner().invoke(cli, [*command, "--kubeconfig", str(config)])
    assert result.exit_code == 3, result.output
    assert f"error: {url} is not a Kubernetes API server (it answers GET /version with 404)" in result.stderr
    assert "is installed" not in result.stderr


def test_the_cluster_is_the_contexts_cluster_name(tmp_path: Path) -> None:
    """A tracked run's kubetrain.cluster tag (kubetrain.submit renders with it)."""
    path = write_kubeconfig(tmp_path / "config", "https://10.0.0.1:6443", {"token": "t"})
    assert connect(kubeconfig=str(path)).cluster == "c"
