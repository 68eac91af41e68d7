"""The operators' admission webhooks beside the local kube-apiserver of `validate --exact`.

Where the managers' binaries are found (the same places as etcd and kube-apiserver: --server-binaries,
$KUBEBUILDER_ASSETS, setup-envtest's store, kubetrain's test environment), each is started the first time a
document holds a kind it admits, and lives as long as the server: its pid joins the server's `state.json`,
so `--stop-server` and the idle reaper stop it with etcd and kube-apiserver.

- training-operator v1.9.4 (`training-operator`): PyTorchJob. Its cert-controller rotator keeps its CA and
  serving certificate in Secret `training-operator-webhook-cert`; we create that Secret in the exact shape the
  rotator accepts (an RSA CA named `training-operator-ca`, a serving certificate for
  `training-operator.kubeflow.svc` and 127.0.0.1, keys in PKCS#1), so it keeps them.
- JobSet v0.12.0 (`jobset`) and Trainer v2.3.0 (`trainer-controller-manager`): JobSet, TrainJob,
  TrainingRuntime, ClusterTrainingRuntime, in their "certificates provided externally" mode.

Each webhook configuration is upstream's with `url: https://127.0.0.1:<port>/...` for the Service
reference. The certificates are made once per server directory with the `openssl` command (the API server's
own serving certificate needs no code here either).
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import http.client
import json
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubetrain.jobs.localapi import (
    LocalServerError,
    ServerState,
    alive,
    api_resources,
    candidate_dirs,
    flocked,
    free_ports,
    kill_all,
    log_tail,
    read_state,
    write_private,
)
from kubetrain.jobs.trainjobset import TORCH_DISTRIBUTED
from kubetrain.kube.errors import ApiError, Conflict, NotFound, Unreachable, api_message
from kubetrain.kube.rest import Rest

START_DEADLINE = 120.0  # seconds: a manager's start to a webhook that answers (~5-15 s on a loaded 2-core machine)
NOT_SERVING = "failed calling webhook"  # what the API server says while a webhook does not answer (yet)
OPERATOR_NAMESPACE = "kubeflow"
OPERATOR_SERVICE = "training-operator"
OPERATOR_SECRET = "training-operator-webhook-cert"
OPERATOR_CA = "training-operator-ca"
# The rotator waits for this file before it declares its certificates ready (cert-controller's
# ensureCertsMounted: only that it exists; the webhook server itself reads $TMPDIR/k8s-webhook-server/...).
ROTATOR_CERT = Path("/tmp/k8s-webhook-server/serving-certs/tls.crt")
TRAINER, JOBSET = ("trainer.kubeflow.org", "v1alpha1"), ("jobset.x-k8s.io", "v1alpha2")
KEY_PREFIX = "webhook:"


@dataclass(frozen=True)
class Manager:
    """An operator's manager binary and the kinds its webhooks admit (group, kind)."""

    name: str
    binary: str
    kinds: frozenset[tuple[str, str]]
    crds: tuple[tuple[str, str], ...]  # (apiVersion, kind) of the CRDs it needs installed before it starts
    after: tuple[str, ...] = ()  # managers started first


TRAINING_OPERATOR = Manager("training-operator", "training-operator", frozenset({("kubeflow.org", "PyTorchJob")}),
                            (("kubeflow.org/v1", "PyTorchJob"),))
JOBSET_MANAGER = Manager("jobset", "jobset", frozenset({("jobset.x-k8s.io", "JobSet")}),
                         (("jobset.x-k8s.io/v1alpha2", "JobSet"),))
TRAINER_KINDS = ("TrainJob", "TrainingRuntime", "ClusterTrainingRuntime")
TRAINER_MANAGER = Manager("trainer", "trainer-controller-manager", frozenset((TRAINER[0], k) for k in TRAINER_KINDS),
                          (*((f"{TRAINER[0]}/{TRAINER[1]}", k) for k in TRAINER_KINDS),
                           ("jobset.x-k8s.io/v1alpha2", "JobSet")), after=("jobset",))
MANAGERS = {m.name: m for m in (TRAINING_OPERATOR, JOBSET_MANAGER, TRAINER_MANAGER)}


def manager_for(api_version: str, kind: str) -> Manager | None:
    group = api_version.split("/", maxsplit=1)[0] if "/" in api_version else ""
    return next((m for m in MANAGERS.values() if (group, kind) in m.kinds), None)


def find_manager_binary(binary: str, explicit: str | None, version: str, server_binaries: str) -> Path | None:
    """The manager's binary beside etcd and kube-apiserver, else wherever those are looked for."""
    for directory in (Path(server_binaries), *candidate_dirs(explicit, version)):
        path = directory / binary
        if path.is_file() and os.access(path, os.X_OK):
            return path
    return None


class LocalWebhooks:
    """`admit(apiVersion, kind)`: makes sure the webhooks of the kind's operator run beside the server (starting
    its manager when its binary is found and it is not running); True when they do."""

    def __init__(self, rest: Rest, directory: Path, explicit: str | None, version: str,
                 install: Callable[[str, str], bool] | None) -> None:
        self.rest, self.dir, self.explicit, self.version, self.install = rest, directory, explicit, version, install
        self.live: dict[str, bool] = {}
        self.started: dict[str, float] = {}  # managers this run started: seconds to a webhook that answers

    def running(self) -> list[str]:
        return [name for name, live in self.live.items() if live]

    def admit(self, api_version: str, kind: str) -> bool:
        manager = manager_for(api_version, kind)
        return manager is not None and self.ensure(manager)

    def ensure(self, manager: Manager) -> bool:
        if manager.name not in self.live:
            self.live[manager.name] = all(self.ensure(MANAGERS[m]) for m in manager.after) and self._ensure(manager)
        return self.live[manager.name]

    def _ensure(self, manager: Manager) -> bool:
        with flocked(self.dir / "start.lock", fcntl.LOCK_EX):
            state = read_state(self.dir)
            if state is None:
                raise LocalServerError("the local API server stopped while validate used it")
            pid = state.pids.get(KEY_PREFIX + manager.name)
            if pid is not None and alive(pid):
                return True
            binary = find_manager_binary(manager.binary, self.explicit, self.version, state.binaries)
            if binary is None or not self._crds_installed(manager):
                return False
            began = time.monotonic()
            pid = self._start(manager, binary, state)
            self.started[manager.name] = time.monotonic() - began
            pids = {**state.pids, KEY_PREFIX + manager.name: pid}
            write_private(self.dir / "state.json", json.dumps({**state.__dict__, "pids": pids}))
        return True

    def keep(self, obj: dict[str, Any]) -> None:
        """A runtime the files define, accepted: created for real (replacing one of that name), for the
        TrainJobs after it: the Trainer's webhook reads the runtime a TrainJob names from the cluster."""
        kind, meta = obj.get("kind"), obj.get("metadata")
        if kind not in ("TrainingRuntime", "ClusterTrainingRuntime") or not self.live.get("trainer") or \
                not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
            return
        group, version = TRAINER
        namespace = str(meta.get("namespace") or "default") if kind == "TrainingRuntime" else None
        plural = "trainingruntimes" if namespace else "clustertrainingruntimes"
        scope = f"/namespaces/{namespace}" if namespace else ""
        body = {k: v for k, v in obj.items() if k != "status"}
        create_or_replace(self.rest, f"/apis/{group}/{version}{scope}/{plural}", body)
        self._wait_known(str(kind), meta["name"], namespace or "default")

    def _wait_known(self, kind: str, name: str, namespace: str) -> None:
        """Until the Trainer's cache has the runtime: a dry-run TrainJob naming it is no longer refused for
        naming a runtime that does not exist."""
        group, version = TRAINER
        probe = {"apiVersion": f"{group}/{version}", "kind": "TrainJob", "metadata": {"name": "runtime-probe"},
                 "spec": {"runtimeRef": {"name": name, "kind": kind}}}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                self.rest.json("POST", f"/apis/{group}/{version}/namespaces/{namespace}/trainjobs",
                               {"dryRun": "All"}, probe)
                return
            except ApiError as exc:
                if "must be created before" not in api_message(exc):
                    return
            time.sleep(0.05)

    def _crds_installed(self, manager: Manager) -> bool:
        if self.install is not None:
            for api_version, kind in manager.crds:
                self.install(api_version, kind)
        return all(_served(self.rest, api_version, kind) for api_version, kind in manager.crds)

    def _start(self, manager: Manager, binary: Path, state: ServerState) -> int:
        work = self.dir / "webhooks" / manager.name
        work.mkdir(parents=True, exist_ok=True)
        ca = certificate_authority(self.dir / "webhooks" / "pki")
        webhook_port, probe_port = free_ports(2)
        kubeconfig = write_kubeconfig(self.dir, state)
        starts = {"training-operator": self._training_operator, "jobset": self._jobset, "trainer": self._trainer}
        argv, env = starts[manager.name](binary, work, ca, webhook_port, probe_port)
        env = {**os.environ, **env, "KUBECONFIG": str(kubeconfig)}
        with open(self.dir / "logs" / f"{manager.name}.log", "ab") as log:
            pid = subprocess.Popen([*argv, f"--kubeconfig={kubeconfig}"], stdin=subprocess.DEVNULL, stdout=log,
                                   stderr=log, cwd=work, env=env, start_new_session=True).pid
        try:
            self._wait_serving(manager, pid, probe_port)
        except BaseException:
            kill_all({"manager": pid})
            raise
        return pid

    def _training_operator(self, binary: Path, work: Path, ca: Pki, port: int,
                           probe: int) -> tuple[list[str], dict[str, str]]:
        dns = f"{OPERATOR_SERVICE}.{OPERATOR_NAMESPACE}.svc"
        serving = serving_certificate(ca, work / "pki", dns)
        self._namespace(OPERATOR_NAMESPACE)
        secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": OPERATOR_SECRET,
                                                                     "namespace": OPERATOR_NAMESPACE},
                  "data": {"ca.crt": _b64(ca.cert), "ca.key": _b64(ca.key), "tls.crt": _b64(serving.cert),
                           "tls.key": _b64(serving.key)}}
        create_or_replace(self.rest, f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/secrets", secret)
        hook = _hook("validator.pytorchjob.training-operator.kubeflow.org", port,
                     "/validate-kubeflow-org-v1-pytorchjob", ca, ("kubeflow.org", "v1", "pytorchjobs",
                                                                  ["CREATE", "UPDATE"]))
        register(self.rest, [_config("ValidatingWebhookConfiguration", "validator.training-operator.kubeflow.org",
                                     [hook])])
        tmp = work / "tmp"
        _write_serving(tmp / "k8s-webhook-server" / "serving-certs", serving)
        _rotator_mount(serving)
        argv = [str(binary), "--enable-scheme=pytorchjob", "--metrics-bind-address=0",
                f"--health-probe-bind-address=127.0.0.1:{probe}", f"--webhook-server-port={port}",
                f"--webhook-service-name={OPERATOR_SERVICE}", f"--webhook-secret-name={OPERATOR_SECRET}"]
        return argv, {"TMPDIR": str(tmp), "MY_POD_NAMESPACE": OPERATOR_NAMESPACE}

    def _jobset(self, binary: Path, work: Path, ca: Pki, port: int, probe: int) -> tuple[list[str], dict[str, str]]:
        certs = work / "certs"
        _write_serving(certs, serving_certificate(ca, work / "pki", "jobset-webhook-service.jobset-system.svc"))
        register(self.rest, jobset_webhooks(port, ca))
        config = {"apiVersion": "config.jobset.x-k8s.io/v1alpha1", "kind": "Configuration",
                  "leaderElection": {"leaderElect": False}, "internalCertManagement": {"enable": False},
                  "webhook": {"port": port, "host": "127.0.0.1", "certDir": str(certs)},
                  "metrics": {"bindAddress": "0"}, "health": {"healthProbeBindAddress": f"127.0.0.1:{probe}"}}
        (work / "config.yaml").write_text(json.dumps(config))  # JSON is YAML
        return [str(binary), f"--config={work / 'config.yaml'}"], {}

    def _trainer(self, binary: Path, work: Path, ca: Pki, port: int, probe: int) -> tuple[list[str], dict[str, str]]:
        tmp = work / "tmp"
        _write_serving(tmp / "k8s-webhook-server" / "serving-certs",
                       serving_certificate(ca, work / "pki", "kubeflow-trainer-controller-manager.kubeflow-system.svc"))
        register(self.rest, trainer_webhooks(port, ca))
        config = {"apiVersion": "config.trainer.kubeflow.org/v1alpha1", "kind": "Configuration",
                  "health": {"healthProbeBindAddress": f"127.0.0.1:{probe}"},
                  "metrics": {"bindAddress": "0", "secureServing": False},
                  "webhook": {"port": port, "host": "127.0.0.1"}, "leaderElection": {"leaderElect": False},
                  "certManagement": {"enable": False}}
        (work / "config.yaml").write_text(json.dumps(config))
        # controller-runtime's default cert dir is $TMPDIR/k8s-webhook-server/serving-certs
        return [str(binary), f"--config={work / 'config.yaml'}"], {"TMPDIR": str(tmp)}

    def _namespace(self, name: str) -> None:
        with contextlib.suppress(Conflict):
            self.rest.json("POST", "/api/v1/namespaces", None, {"apiVersion": "v1", "kind": "Namespace",
                                                                "metadata": {"name": name}})

    def _wait_serving(self, manager: Manager, pid: int, probe: int) -> None:
        """Until the manager is ready and the API server gets an answer from its webhook: a probe object
        dry-run (the shipped torch-distributed runtime is created for real: TrainJobs name it)."""
        deadline = time.monotonic() + START_DEADLINE
        last = "not ready"
        while time.monotonic() < deadline:
            if not alive(pid):
                raise LocalServerError(f"the local {manager.binary} exited at start: "
                                       f"{log_tail(self.dir, manager.name)}")
            if _ready(probe):
                last = self._probe(manager)
                if not last:
                    return
            time.sleep(0.2)
        raise LocalServerError(f"the local {manager.binary}'s webhook did not answer within {START_DEADLINE:.0f} s "
                               f"({last}; log: {self.dir / 'logs' / (manager.name + '.log')})")

    def _probe(self, manager: Manager) -> str:
        body, collection, query = _probe_object(manager)
        try:
            self.rest.json("POST", collection, query, body)
        except Conflict:
            return ""
        except ApiError as exc:
            message = api_message(exc)
            return message if NOT_SERVING in message or exc.status == 404 else ""
        except Unreachable as exc:
            return str(exc)
        return ""


def remove_webhooks(rest: Rest, directory: Path) -> list[str]:
    """The local server without the operators' webhooks (`--no-webhooks`): their managers stopped and their
    configurations deleted. Returns the managers that were running."""
    with flocked(directory / "start.lock", fcntl.LOCK_EX):
        state = read_state(directory)
        running = {k: v for k, v in (state.pids if state else {}).items() if k.startswith(KEY_PREFIX)}
        for kind, configs in (("validating", ("validator.training-operator.kubeflow.org",
                                              "jobset-validating-webhook-configuration",
                                              "validator.trainer.kubeflow.org")),
                              ("mutating", ("jobset-mutating-webhook-configuration",
                                            "defaulter.trainer.kubeflow.org"))):
            for name in configs:
                with contextlib.suppress(NotFound):
                    rest.request("DELETE", f"/apis/admissionregistration.k8s.io/v1/{kind}webhookconfigurations/{name}")
        if state is not None and running:
            kill_all(running)
            pids = {k: v for k, v in state.pids.items() if k not in running}
            write_private(directory / "state.json", json.dumps({**state.__dict__, "pids": pids}))
    return [name.removeprefix(KEY_PREFIX) for name in running]


def _probe_object(manager: Manager) -> tuple[dict[str, Any], str, dict[str, str] | None]:
    dry = {"dryRun": "All"}
    if manager.name == "trainer":
        group, version = TRAINER
        return TORCH_DISTRIBUTED, f"/apis/{group}/{version}/clustertrainingruntimes", None
    container = {"name": "pytorch", "image": "probe:0"}
    if manager.name == "training-operator":
        job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "probe"},
               "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": {
                   "spec": {"containers": [container]}}}}}}
        return job, "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs", dry
    group, version = JOBSET
    jobset = {"apiVersion": f"{group}/{version}", "kind": "JobSet", "metadata": {"name": "probe"},
              "spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
                  "restartPolicy": "Never", "containers": [container]}}}}}]}}
    return jobset, f"/apis/{group}/{version}/namespaces/default/jobsets", dry


def register(rest: Rest, configs: list[dict[str, Any]]) -> None:
    for config in configs:
        plural = "mutatingwebhookconfigurations" if config["kind"].startswith("Mutating") else \
            "validatingwebhookconfigurations"
        create_or_replace(rest, f"/apis/admissionregistration.k8s.io/v1/{plural}", config)


def create_or_replace(rest: Rest, collection: str, body: dict[str, Any]) -> None:
    name = body["metadata"]["name"]
    try:
        rest.json("POST", collection, None, body)
    except Conflict:
        current = rest.get(f"{collection}/{name}")
        replaced = {**body, "metadata": {**body["metadata"],
                                         "resourceVersion": (current.get("metadata") or {}).get("resourceVersion")}}
        rest.json("PUT", f"{collection}/{name}", None, replaced)


def _hook(name: str, port: int, path: str, ca: Pki, rule: tuple[str, str, str, list[str]]) -> dict[str, Any]:
    group, version, resource, operations = rule
    return {"name": name, "admissionReviewVersions": ["v1"],
            "clientConfig": {"url": f"https://127.0.0.1:{port}{path}", "caBundle": _b64(ca.cert)},
            "failurePolicy": "Fail", "sideEffects": "None",
            "rules": [{"apiGroups": [group], "apiVersions": [version], "operations": operations,
                       "resources": [resource]}]}


def _config(kind: str, name: str, hooks: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind, "metadata": {"name": name},
            "webhooks": hooks}


def jobset_webhooks(port: int, ca: Pki) -> list[dict[str, Any]]:
    """JobSet v0.12.0's config/components/webhook."""
    jobsets = (*JOBSET, "jobsets")
    pods = ("", "v1", "pods", ["CREATE"])
    jobset_pods = {"matchExpressions": [{"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}]}
    return [
        _config("MutatingWebhookConfiguration", "jobset-mutating-webhook-configuration", [
            _hook("mjobset.kb.io", port, "/mutate-jobset-x-k8s-io-v1alpha2-jobset", ca, (*jobsets, ["CREATE"])),
            _hook("mpod.kb.io", port, "/mutate--v1-pod", ca, pods) | {"objectSelector": jobset_pods}]),
        _config("ValidatingWebhookConfiguration", "jobset-validating-webhook-configuration", [
            _hook("vjobset.kb.io", port, "/validate-jobset-x-k8s-io-v1alpha2-jobset", ca,
                  (*jobsets, ["CREATE", "UPDATE"])),
            _hook("vpod.kb.io", port, "/validate--v1-pod", ca, pods) | {"objectSelector": jobset_pods}]),
    ]


def trainer_webhooks(port: int, ca: Pki) -> list[dict[str, Any]]:
    """Trainer v2.3.0's manifests/base/webhook."""
    group, version = TRAINER
    create_update = ["CREATE", "UPDATE"]
    opt_out = {"matchExpressions": [{"key": "trainer.kubeflow.org/webhook-validation", "operator": "NotIn",
                                     "values": ["disabled"]}]}

    def validator(resource: str, kind: str) -> dict[str, Any]:
        return _hook(f"validator.{kind}.trainer.kubeflow.org", port, f"/validate-trainer-kubeflow-org-{version}-{kind}",
                     ca, (group, version, resource, create_update))

    return [
        _config("MutatingWebhookConfiguration", "defaulter.trainer.kubeflow.org", [
            _hook("defaulter.trainjob.trainer.kubeflow.org", port, f"/mutate-trainer-kubeflow-org-{version}-trainjob",
                  ca, (group, version, "trainjobs", create_update))]),
        _config("ValidatingWebhookConfiguration", "validator.trainer.kubeflow.org", [
            validator("clustertrainingruntimes", "clustertrainingruntime") | {"objectSelector": opt_out},
            validator("trainingruntimes", "trainingruntime") | {"objectSelector": opt_out},
            validator("trainjobs", "trainjob")]),
    ]


@dataclass(frozen=True)
class Pki:
    """PEM files: a certificate and its key (PKCS#1 for RSA)."""

    cert: bytes
    key: bytes


def certificate_authority(directory: Path) -> Pki:
    """The webhooks' CA, made once: RSA (the training-operator's rotator parses its key as PKCS#1) and
    named as that rotator expects, so it keeps the certificates we give it."""
    crt, key = directory / "ca.crt", directory / "ca.key"
    if not (crt.is_file() and key.is_file()):
        directory.mkdir(parents=True, exist_ok=True)
        _openssl("genrsa", "-traditional", "-out", str(key), "2048")
        _openssl("req", "-x509", "-new", "-key", str(key), "-subj", f"/CN={OPERATOR_CA}", "-days", "3650",
                 "-addext", f"subjectAltName=DNS:{OPERATOR_CA}", "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,digitalSignature,keyEncipherment,keyCertSign", "-out", str(crt))
    return Pki(crt.read_bytes(), key.read_bytes())


def serving_certificate(ca: Pki, directory: Path, dns: str) -> Pki:
    """A serving certificate for `dns` and 127.0.0.1 (the webhook URLs), 10 years (the rotator renews what
    expires within 90 days)."""
    crt, key = directory / "tls.crt", directory / "tls.key"
    if not (crt.is_file() and key.is_file()):
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "ca.crt").write_bytes(ca.cert)
        write_private(directory / "ca.key", ca.key.decode())
        extensions = directory / "extensions.cnf"
        extensions.write_text(f"subjectAltName=DNS:{dns},IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"
                              "keyUsage=critical,digitalSignature,keyEncipherment\nbasicConstraints=critical,CA:FALSE\n")
        _openssl("genrsa", "-traditional", "-out", str(key), "2048")
        _openssl("req", "-new", "-key", str(key), "-subj", f"/CN={dns}", "-out", str(directory / "tls.csr"))
        _openssl("x509", "-req", "-in", str(directory / "tls.csr"), "-CA", str(directory / "ca.crt"), "-CAkey",
                 str(directory / "ca.key"), "-CAcreateserial", "-days", "3650", "-extfile", str(extensions),
                 "-out", str(crt))
        (directory / "ca.key").unlink()
    return Pki(crt.read_bytes(), key.read_bytes())


def _openssl(*args: str) -> None:
    try:
        done = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False, timeout=60)
    except FileNotFoundError:
        raise LocalServerError("the operators' webhooks need the `openssl` command once, for their "
                               "certificates") from None
    if done.returncode != 0:
        raise LocalServerError(f"openssl {args[0]} failed: {done.stderr.strip()[:200]}")


def _write_serving(directory: Path, serving: Pki) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tls.crt").write_bytes(serving.cert)
    write_private(directory / "tls.key", serving.key.decode())


def _rotator_mount(serving: Pki) -> None:
    """The file the training-operator's rotator waits for (only its existence counts); left as found when
    another operator on this machine made it."""
    if not ROTATOR_CERT.exists():
        with contextlib.suppress(OSError):
            ROTATOR_CERT.parent.mkdir(parents=True, exist_ok=True)
            ROTATOR_CERT.write_bytes(serving.cert)
    if not ROTATOR_CERT.exists():
        raise LocalServerError(f"the training-operator needs {ROTATOR_CERT} to exist (its certificate rotator "
                               "waits for it) and it cannot be made")


def write_kubeconfig(directory: Path, state: ServerState) -> Path:
    """A kubeconfig for the managers: the server's token and its own serving certificate."""
    config = {"apiVersion": "v1", "kind": "Config", "current-context": "local",
              "clusters": [{"name": "local", "cluster": {
                  "server": state.server, "certificate-authority": str(directory / "certs" / "apiserver.crt")}}],
              "users": [{"name": "kubetrain", "user": {"token": state.token}}],
              "contexts": [{"name": "local", "context": {"cluster": "local", "user": "kubetrain"}}]}
    path = directory / "managers.kubeconfig"
    write_private(path, json.dumps(config))
    return path


def _served(rest: Rest, api_version: str, kind: str) -> bool:
    return any(r.get("kind") == kind for r in api_resources(rest, api_version))


def _ready(port: int) -> bool:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        connection.request("GET", "/readyz")
        return connection.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
