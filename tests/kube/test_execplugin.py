"""Exec credential plugins run by kubetrain itself (kubetrain.kube.execplugin), without the kubernetes package.

The plugins are real executables (Python scripts) speaking client.authentication.k8s.io: the legitimate stand-in
for aws / gke-gcloud-auth-plugin / kubelogin, which cannot run here. One returns the test control plane's own
client certificate, as some plugins (e.g. for on-prem clusters) do, and `kubetrain list` / `status` use it against
the real API server.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from kubetrain.cli.main import cli
from kubetrain.kube.connection import connect
from kubetrain.kube.errors import AuthPluginError
from tests.kube.test_connection import recorder, write_kubeconfig  # noqa: F401 (fixture)
from tests.testenv.fakeapi import FakeApi

V1 = "client.authentication.k8s.io/v1"
V1BETA1 = "client.authentication.k8s.io/v1beta1"


def python_plugin(path: Path, body: str) -> Path:
    """A plugin: `body` runs with `record` (append a JSON line to <path>.log) and `emit` (print the credential)."""
    path.write_text(f"#!{sys.executable}\n"
                    "import json, os, sys\n"
                    f"LOG = {str(path) + '.log'!r}\n"
                    "def record(**kw):\n"
                    "    with open(LOG, 'a') as f: f.write(json.dumps(kw) + '\\n')\n"
                    "def emit(version, **status):\n"
                    "    print(json.dumps({'apiVersion': version, 'kind': 'ExecCredential', 'status': status}))\n"
                    + body)
    path.chmod(0o755)
    return path


def runs(plugin: Path) -> list[dict[str, Any]]:
    log = Path(str(plugin) + ".log")
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_args_env_and_cluster_info_reach_the_plugin(tmp_path: Path, recorder: str,  # noqa: F811
                                                     fake_api: FakeApi) -> None:
    plugin = python_plugin(tmp_path / "get-token", f"""
record(argv=sys.argv[1:], region=os.environ.get('AWS_REGION'), info=json.loads(os.environ['KUBERNETES_EXEC_INFO']),
       cwd=os.getcwd())
emit({V1BETA1!r}, token='tok-' + sys.argv[2])
""")
    ca = b"-----BEGIN CERTIFICATE-----\nnot really\n-----END CERTIFICATE-----\n"
    config = write_kubeconfig(tmp_path / "kc", recorder, {"exec": {
        "apiVersion": V1BETA1, "command": "./get-token", "args": ["--cluster", "prod"],
        "env": [{"name": "AWS_REGION", "value": "eu-west-1"}], "provideClusterInfo": True,
        "interactiveMode": "Never"}})
    data = yaml.safe_load(config.read_text())
    data["clusters"][0]["cluster"]["certificate-authority-data"] = base64.b64encode(ca).decode()
    config.write_text(yaml.safe_dump(data))
    connection = connect(kubeconfig=str(config))
    connection.rest.get("/api")
    assert fake_api.seen[-1].headers["authorization"] == "Bearer tok-prod"
    [run] = runs(plugin)
    assert run["argv"] == ["--cluster", "prod"] and run["region"] == "eu-west-1"
    assert run["cwd"] == str(tmp_path)  # the relative command ran from the kubeconfig's directory
    assert run["info"] == {"apiVersion": V1BETA1, "kind": "ExecCredential", "spec": {
        "interactive": False, "cluster": {"server": recorder,
                                          "certificate-authority-data": base64.b64encode(ca).decode()}}}


def test_a_token_is_reused_until_it_expires(tmp_path: Path, recorder: str) -> None:  # noqa: F811
    later = (dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    lasting = python_plugin(tmp_path / "lasting", f"record(); emit({V1!r}, token='a', expirationTimestamp={later!r})\n")
    soon = (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    expiring = python_plugin(tmp_path / "expiring",
                             f"record(); emit({V1!r}, token='b', expirationTimestamp={soon!r})\n")
    for plugin, expected in ((lasting, 1), (expiring, 4)):
        config = write_kubeconfig(tmp_path / f"kc-{plugin.name}", recorder, {"exec": {
            "apiVersion": V1, "command": str(plugin), "interactiveMode": "IfAvailable"}})
        connection = connect(kubeconfig=str(config))
        for _ in range(3):
            connection.rest.get("/api")
        # within 30 s of its expiry a token is renewed before every request, as client-go does
        assert len(runs(plugin)) == expected, plugin.name


@pytest.mark.parametrize(("stdout", "message"), [
    ("not json", "printed no ExecCredential JSON"),
    (json.dumps({"apiVersion": V1BETA1, "kind": "ExecCredential", "status": {"token": "t"}}),
     f"answered in apiVersion '{V1BETA1}', not the '{V1}' the kubeconfig asks for"),
    (json.dumps({"apiVersion": V1, "kind": "ExecCredential", "status": {}}),
     "returned neither a token nor a client certificate"),
    (json.dumps({"apiVersion": V1, "kind": "ExecCredential", "status": {"clientCertificateData": "x"}}),
     "returned only one of clientCertificateData and clientKeyData"),
])
def test_a_malformed_credential_is_one_clear_error(tmp_path: Path, stdout: str, message: str) -> None:
    plugin = python_plugin(tmp_path / "bad", f"print({stdout!r})\n")
    config = write_kubeconfig(tmp_path / "kc", "https://127.0.0.1:1", {"exec": {"apiVersion": V1,
                                                                                "command": str(plugin)}})
    with pytest.raises(AuthPluginError) as caught:
        connect(kubeconfig=str(config))
    assert str(caught.value).startswith(f"kubeconfig user u: auth plugin {plugin} ")
    assert message in str(caught.value)


def test_always_interactive_without_a_terminal_is_refused(tmp_path: Path) -> None:
    plugin = python_plugin(tmp_path / "login", f"record(); emit({V1!r}, token='t')\n")
    config = write_kubeconfig(tmp_path / "kc", "https://127.0.0.1:1", {"exec": {
        "apiVersion": V1, "command": str(plugin), "interactiveMode": "Always"}})
    result = CliRunner().invoke(cli, ["list", "--kubeconfig", str(config)])
    assert result.exit_code == 3
    assert result.stderr == (f"error: kubeconfig user u: auth plugin {plugin} needs an interactive terminal "
                             "(interactiveMode: Always) and stdin is not one\n")
    assert runs(plugin) == []


def certificate_plugin(tmp_path: Path, controlplane: Any) -> Path:
    """A kubeconfig whose user is an exec plugin returning the control plane admin's client certificate."""
    admin = yaml.safe_load(controlplane.kubeconfig.read_text())
    user = admin["users"][0]["user"]
    cert, key = (base64.b64decode(user[k]).decode() for k in ("client-certificate-data", "client-key-data"))
    plugin = python_plugin(tmp_path / "cert-plugin", f"record(); emit({V1!r}, clientCertificateData={cert!r}, "
                                                     f"clientKeyData={key!r})\n")
    admin["users"][0]["user"] = {"exec": {"apiVersion": V1, "command": str(plugin), "interactiveMode": "Never"}}
    config = tmp_path / "exec-kubeconfig"
    config.write_text(yaml.safe_dump(admin))
    return config


def test_status_and_list_with_an_exec_plugin_import_no_kubernetes_package(tmp_path: Path, controlplane: Any,
                                                                           namespace: str) -> None:
    config = certificate_plugin(tmp_path, controlplane)
    code = ("import sys\nfrom kubetrain.cli.main import cli\n"
            "for args in (['list', '-n', sys.argv[2]], ['status', 'nope', '-n', sys.argv[2]]):\n"
            "    try: cli([*args, '--kubeconfig', sys.argv[1]])\n"
            "    except SystemExit as exc: print('exit', exc.code, file=sys.stderr)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('kubernetes', 'urllib3')))\n")
    done = subprocess.run([sys.executable, "-c", code, str(config), namespace], capture_output=True, text=True,
                          check=True)
    # list answers from the real API server (no jobs yet); status of a missing job is exit 1, not 3 (no login error)
    lines = done.stderr.splitlines()
    assert lines == [f"no jobs in namespace {namespace}", "exit 0",
                     f"error: no PyTorchJob named nope in namespace {namespace} (list them: kubetrain list -n "
                     f"{namespace})", "exit 1"], done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
    assert len(runs(tmp_path / "cert-plugin")) == 2  # once per command
