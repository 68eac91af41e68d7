"""Pod rules that differ between Kubernetes minor versions (kubetrain/rules/k8s/versions.py): each case's
verdict under every supported `--kubernetes-version`, and the default version's verdicts against the suite's
real kube-apiserver (tests/testenv/versions.env, the same minor version), the object and each pod template as a Pod."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from click.testing import CliRunner

from kubetrain.cli.main import cli
from kubetrain.fieldpath import join_path
from kubetrain.rules.k8s.check import k8s_findings
from kubetrain.rules.k8s.versions import DEFAULT, rules_for
from kubetrain.validate import SchemaStore
from kubetrain.validate.engine import validate_objects
from tests.testenv import binaries
from tests.validate import oracle

Obj = dict[str, Any]
VERSIONS = range(31, 38)
OK, WARN, ERR = "valid", "warning", "error"


def _c(spec: Obj) -> Obj:
    return spec["containers"][0]  # type: ignore[no-any-return]


def _sleep(seconds: int) -> Callable[[Obj], None]:
    return lambda s: _c(s).update(lifecycle={"preStop": {"sleep": {"seconds": seconds}}})


def _init(**fields: Any) -> Callable[[Obj], None]:
    return lambda s: s.update(initContainers=[{"name": "init", "image": "busybox:1.36", "command": ["true"],
                                               **fields}])


RULE = {"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}}


def _from(verdicts: dict[int, str]) -> dict[int, str]:
    """{first minor: verdict}: the verdict holds from that version on."""
    return {minor: next(v for start, v in sorted(verdicts.items(), reverse=True) if minor >= start)
            for minor in VERSIONS}


# (case, change to the pod spec, the field reported, verdict per minor version)
CASES: list[tuple[str, Callable[[Obj], None], str, dict[int, str]]] = [
    ("env-name-space", lambda s: _c(s).update(env=[{"name": "MY VAR", "value": "1"}]),
     "spec.containers[0].env[0].name", _from({31: ERR, 32: OK})),
    ("env-name-digit", lambda s: _c(s).update(env=[{"name": "1VAR", "value": "1"}]),
     "spec.containers[0].env[0].name", _from({31: ERR, 32: OK})),
    ("env-name-dots", lambda s: _c(s).update(env=[{"name": "..A", "value": "1"}]),
     "spec.containers[0].env[0].name", _from({31: ERR, 32: OK})),
    ("env-name-equals", lambda s: _c(s).update(env=[{"name": "A=B", "value": "1"}]),
     "spec.containers[0].env[0].name", _from({31: ERR})),
    ("env-prefix-colon", lambda s: _c(s).update(envFrom=[{"prefix": "APP:", "configMapRef": {"name": "cm"}}]),
     "spec.containers[0].envFrom[0].prefix", _from({31: ERR, 32: OK})),
    ("sleep-zero", _sleep(0), "spec.containers[0].lifecycle.preStop.sleep.seconds", _from({31: ERR, 33: OK})),
    ("sleep-one", _sleep(1), "", _from({31: OK})),
    ("sleep-negative", _sleep(-1), "spec.containers[0].lifecycle.preStop.sleep.seconds", _from({31: ERR})),
    ("sleep-over-grace", _sleep(31), "spec.containers[0].lifecycle.preStop.sleep.seconds", _from({31: ERR})),
    ("dns-search-underscore", lambda s: s.update(dnsConfig={"searches": ["_srv.example.com"]}),
     "spec.dnsConfig.searches[0]", _from({31: ERR, 33: OK})),
    ("dns-search-root", lambda s: s.update(dnsConfig={"searches": ["."]}), "spec.dnsConfig.searches[0]",
     _from({31: ERR, 33: OK})),
    ("dns-nameserver-leading-zero", lambda s: s.update(dnsConfig={"nameservers": ["010.0.0.1"]}),
     "spec.dnsConfig.nameservers[0]", _from({31: OK, 36: ERR})),
    ("dns-nameserver-ipv4-mapped", lambda s: s.update(dnsConfig={"nameservers": ["::ffff:10.0.0.1"]}),
     "spec.dnsConfig.nameservers[0]", _from({31: OK, 36: ERR})),
    ("dns-nameserver-zone", lambda s: s.update(dnsConfig={"nameservers": ["fe80::1%eth0"]}),
     "spec.dnsConfig.nameservers[0]", _from({31: ERR})),
    ("dns-none-without-config", lambda s: s.update(dnsPolicy="None"), "spec.dnsConfig", _from({31: ERR})),
    ("container-restart-never", lambda s: _c(s).update(restartPolicy="Never"), "spec.containers[0].restartPolicy",
     _from({31: ERR, 34: WARN, 35: OK})),
    ("container-restart-bogus", lambda s: _c(s).update(restartPolicy="Sometimes"),
     "spec.containers[0].restartPolicy", _from({31: ERR, 34: WARN, 35: ERR})),
    ("init-restart-onfailure", _init(restartPolicy="OnFailure"), "spec.initContainers[0].restartPolicy",
     _from({31: ERR, 34: WARN, 35: OK})),
    ("sidecar", _init(restartPolicy="Always"), "", _from({31: OK})),
    ("restart-rules", lambda s: _c(s).update(restartPolicy="Never", restartPolicyRules=[RULE]),
     "spec.containers[0].restartPolicy", _from({31: ERR, 34: WARN, 35: OK})),
    ("restart-rule-without-policy", lambda s: _c(s).update(restartPolicyRules=[RULE]),
     "spec.containers[0].restartPolicy", _from({31: ERR, 34: WARN, 35: ERR})),
    ("restart-all-containers", lambda s: _c(s).update(restartPolicy="Never", restartPolicyRules=[
        {**RULE, "action": "RestartAllContainers"}]), "spec.containers[0].restartPolicy",
     _from({31: ERR, 34: WARN, 35: ERR, 36: OK})),
    ("sidecar-with-rules", _init(restartPolicy="Always", restartPolicyRules=[RULE]),
     "spec.initContainers[0].restartPolicyRules", _from({31: ERR, 34: WARN, 35: ERR, 36: OK})),
    ("file-key-ref", lambda s: _c(s).update(env=[{"name": "A", "valueFrom": {"fileKeyRef": {
        "path": "a.env", "volumeName": "cfg", "key": "A"}}}]) or s.update(volumes=[{"name": "cfg", "emptyDir": {}}]),
     "spec.containers[0].env[0].valueFrom.fileKeyRef", _from({31: ERR, 35: OK})),
    ("image-volume", lambda s: s.update(volumes=[{"name": "model", "image": {"reference": "busybox:1.36"}}]),
     "spec.volumes[0].image", _from({31: ERR, 35: OK})),
    ("image-volume-without-reference", lambda s: s.update(volumes=[{"name": "model", "image": {}}]),
     "spec.volumes[0].image", _from({31: ERR})),
    ("file-key-ref-missing-volume", lambda s: _c(s).update(env=[{"name": "A", "valueFrom": {"fileKeyRef": {
        "path": "a.env", "volumeName": "cfg", "key": "A"}}}]), "spec.containers[0].env[0].valueFrom.fileKeyRef",
     _from({31: ERR})),
    # Dynamic Resource Allocation: before 1.34 the server drops the claims (the pod starts without its devices).
    ("dra-claim", lambda s: (s.update(resourceClaims=[{"name": "gpus", "resourceClaimTemplateName": "t"}]),
                             _c(s).update(resources={"claims": [{"name": "gpus"}]})),
     "spec.resourceClaims", _from({31: ERR, 34: OK})),
    ("dra-claim-undeclared", lambda s: _c(s).update(resources={"claims": [{"name": "gpus"}]}),
     "spec.containers[0].resources.claims", _from({31: ERR})),
    ("dra-claim-two-sources", lambda s: s.update(resourceClaims=[{"name": "gpus", "resourceClaimName": "c",
                                                                  "resourceClaimTemplateName": "t"}]),
     "spec.resourceClaims", _from({31: ERR})),
    ("dra-claim-no-source", lambda s: s.update(resourceClaims=[{"name": "gpus"}]), "spec.resourceClaims",
     _from({31: ERR})),
    ("dra-claim-upper-case", lambda s: s.update(resourceClaims=[{"name": "GPUs", "resourceClaimTemplateName": "t"}]),
     "spec.resourceClaims", _from({31: ERR})),
]
IDS = [c[0] for c in CASES]


def _pod(change: Callable[[Obj], None]) -> Obj:
    pod = oracle.bases()["Pod"]
    change(pod["spec"])
    return pod


def _deployment(change: Callable[[Obj], None]) -> Obj:
    deployment = oracle.bases()["Deployment"]
    change(deployment["spec"]["template"]["spec"])
    return deployment


def _verdict(obj: Obj, minor: int) -> tuple[str, set[str]]:
    report = validate_objects([copy.deepcopy(obj)], SchemaStore(kubernetes_version=f"1.{minor}"))
    errors, warnings = report.errors(), report.warnings()
    found = errors or warnings
    return (ERR if errors else WARN if warnings else OK), {i.path for i in found}


@pytest.mark.parametrize("minor", VERSIONS)
@pytest.mark.parametrize(("name", "change", "field", "verdicts"), CASES, ids=IDS)
@pytest.mark.parametrize("wrap", [_pod, _deployment], ids=["pod", "deployment"])
def test_verdict_per_version(wrap: Callable[..., Obj], name: str, change: Callable[[Obj], None], field: str,
                             verdicts: dict[int, str], minor: int) -> None:
    verdict, paths = _verdict(wrap(change), minor)
    assert verdict == verdicts[minor], (name, minor, paths)
    if verdict != OK:
        where = field if wrap is _pod else field.replace("spec.", "spec.template.spec.", 1)
        assert any(p.startswith(where) for p in paths), (name, minor, paths)


@pytest.mark.parametrize("minor", VERSIONS)
def test_pytorchjob_templates_follow_the_version(minor: int) -> None:
    """A CRD's pod template has no version-specific schema; the pod rules still follow the flag."""
    job = oracle.bases()["PyTorchJob"]
    container = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    container["env"] = [{"name": "MY VAR", "value": "1"}]
    paths = {join_path(f.path) for f in k8s_findings(job, rules=rules_for(f"1.{minor}")) if f.severity == "error"}
    expected = {"spec.pytorchReplicaSpecs.Master.template.spec.containers[0].env[0].name"} if minor < 32 else set()
    assert paths == expected


@pytest.mark.parametrize("text", ["1.31", "v1.33", "1.34.2", "1.36", "v1.37.2"])
def test_version_forms(text: str) -> None:
    assert rules_for(text).minor == int(text.lstrip("v").split(".")[1])


def _manifest(tmp_path: Path) -> Path:
    path = tmp_path / "pod.yaml"
    path.write_text(yaml.safe_dump(_pod(lambda s: _c(s).update(env=[{"name": "MY VAR", "value": "1"}]))))
    return path


def test_cli_flag_changes_the_verdict(tmp_path: Path) -> None:
    path = _manifest(tmp_path)
    old = CliRunner().invoke(cli, ["validate", "--kubernetes-version", "1.31", str(path)])
    assert old.exit_code == 1, old.output
    assert f"{path}:" in old.output and "spec.containers[0].env[0].name: 'MY VAR'" in old.output
    assert "Kubernetes 1.31; other printable ASCII needs 1.32" in old.output
    for flags in (["--kubernetes-version", "1.32"], []):
        new = CliRunner().invoke(cli, ["validate", *flags, str(path)])
        assert new.exit_code == 0, new.output


@pytest.mark.parametrize("text", ["1.30", "1.38", "2.0", "latest"])
def test_cli_refuses_versions_it_has_no_rules_for(tmp_path: Path, text: str) -> None:
    result = CliRunner().invoke(cli, ["validate", "--kubernetes-version", text, str(_manifest(tmp_path))])
    assert result.exit_code == 2, result.output
    assert "--kubernetes-version" in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


# ---- the default version against the real API server --------------------------------------------------------


@pytest.mark.controlplane
@pytest.mark.parametrize(("name", "change", "field", "verdicts"), CASES, ids=IDS)
def test_default_version_agrees_with_the_server(name: str, change: Callable[[Obj], None], field: str,
                                               verdicts: dict[int, str], k8s: kubernetes.client.ApiClient,
                                               namespace: str) -> None:
    suite = binaries.versions()["KUBERNETES_VERSION"].lstrip("v").split(".")[1]
    assert f"1.{suite}" == DEFAULT  # the default is the suite's kube-apiserver
    for obj in (_pod(change), _deployment(change)):
        server = oracle.server_errors(k8s, obj, namespace)
        offline, _ = _verdict(obj, int(suite))
        assert (offline == ERR) == bool(server), (name, obj["kind"], offline, server)
