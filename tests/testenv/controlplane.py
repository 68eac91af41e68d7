"""A real Kubernetes control plane on loopback, for integration tests.

    with ControlPlane() as cp:            # or cp = ControlPlane().start(); cp.stop()
        api = kubernetes.client.CoreV1Api(cp.api_client())

Runs etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok
(3 GPU nodes + 1 CPU node) and the Kubeflow training-operator from the binaries
prepare.sh built. Every listener is on 127.0.0.1 at a free port; certificates,
kubeconfigs, data and logs live in a temp dir removed on stop().
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import ssl
import tempfile
import time
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import kubernetes
import yaml

from . import binaries, kwok, operator, pki, reference, yamlfiles
from .processes import Child, NotReady, Supervisor, free_port, wait_until

REPO = Path(__file__).resolve().parents[2]
SERVICE_CIDR = "10.96.0.0/16"
ADMIN = "kubetrain-admin"
WORKDIR_PREFIX = "kubetrain-testenv-"


class ControlPlane:
    def __init__(self, workdir: Path | None = None, keep_workdir: bool = False) -> None:
        self.bins = binaries.resolve()
        self.pytorchjob_crd = reference.pytorchjob_crd(reference.verify())
        _remove_orphaned_workdirs()
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX))
        (self.workdir / "owner.pid").write_text(str(os.getpid()))
        self.keep_workdir = keep_workdir
        self.pki_dir = self.workdir / "pki"
        self.pki_dir.mkdir(parents=True, exist_ok=True)
        self.sup = Supervisor(self.workdir / "logs")
        self.ports = {
            name: free_port()
            for name in (
                "etcd",
                "etcd_peer",
                "apiserver",
                "kcm",
                "scheduler",
                "kwok",
                "op_webhook",
                "op_metrics",
                "op_probe",
            )
        }
        self.kubeconfig = self.workdir / "kubeconfig"
        self.timings: dict[str, float] = {}
        self._procs: dict[str, Child] = {}
        self._argvs: dict[str, tuple[list[str], dict[str, str] | None]] = {}  # for restart()

    # ----------------------------------------------------------------- public
    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    def api_client(self, user: str | None = None, groups: tuple[str, ...] = ()) -> kubernetes.client.ApiClient:
        """An ApiClient as the admin, or as `user` in `groups` (client cert)."""
        path = self.kubeconfig if user is None else self.write_kubeconfig(user, groups)
        return kubernetes.config.new_client_from_config(config_file=str(path))

    def set_pod_phase(self, namespace: str, pod: str, phase: str) -> None:
        """Cue kwok to move a pod towards `phase` (Pending/Running/Succeeded/Failed)."""
        if phase not in kwok.PHASES:
            raise ValueError(f"phase must be one of {kwok.PHASES}")
        body = {"metadata": {"annotations": {kwok.PHASE_ANNOTATION: phase}}}
        kubernetes.client.CoreV1Api(self.api_client()).patch_namespaced_pod(pod, namespace, body)

    def set_pod_logs(self, namespace: str, pod: str, lines: list[str], container: str | None = None) -> None:
        """Make `kubectl logs` of that pod return `lines` (a kwok Logs object)."""
        path = self.workdir / "kwok" / f"{namespace}_{pod}_{container or 'all'}.log"
        path.write_text(kwok.cri_log(lines))
        kubernetes.client.CustomObjectsApi(self.api_client()).create_namespaced_custom_object(
            "kwok.x-k8s.io", "v1alpha1", namespace, "logs", kwok.logs_object(namespace, pod, path, container)
        )

    def pids(self) -> list[int]:
        return self.sup.pids()

    def log(self, component: str) -> str:
        return self._procs[component].log.read_text(errors="replace")

    def start(self) -> ControlPlane:
        try:
            # CRDs go in before the controller-manager starts: its garbage collector
            # discovers resource types at start and then only every 30 s.
            for step in (
                self._pki,
                self._etcd,
                self._apiserver,
                self._crds,
                self._controllers,
                self._kwok,
                self._operator,
            ):
                began = time.monotonic()
                step()
                self.timings[step.__name__.strip("_")] = round(time.monotonic() - began, 2)
        except BaseException:
            self.stop()
            raise
        return self

    def restart(self, component: str, down: float = 0.0) -> None:
        """Crash a component (SIGKILL to its process group), keep it down `down` seconds, then start it
        again with the same flags, ports and data, and wait until it is ready. For fault drills."""
        starters = {"etcd": self._etcd, "kube-apiserver": self._apiserver}
        child = self._procs[component]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        self.sup.stop_child(child, timeout=5)
        time.sleep(down)
        starters[component]()
        if component == "kube-apiserver":
            self._restart_operator()

    def _restart_operator(self) -> None:
        """controller-runtime exits when it cannot renew its leader lease (the API server was away), and its
        Deployment would restart it: start it again, and wait until it serves its webhook and reconciles."""
        self.sup.stop_child(self._procs["training-operator"], timeout=5)
        child = self._start("training-operator", *self._argvs["training-operator"])
        probe = f"http://127.0.0.1:{self.ports['op_probe']}/readyz"
        wait_until(lambda: http_get(probe) == "ok", "training-operator /readyz after a restart", 60, child)
        self._wait_reconciling(self.api_client(), child)

    def stop(self) -> None:
        # 2 s each, not 10: nothing is kept, and once the tests' clients have come and gone kube-apiserver's
        # graceful termination stalls after "quota evaluator worker shutdown" until it is killed.
        self.sup.stop(timeout=2)
        if not self.keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -------------------------------------------------------------- kubeconfig
    def write_kubeconfig(self, user: str, groups: tuple[str, ...] = (), path: Path | None = None) -> Path:
        pair = pki.client_cert(self.ca, user, groups)
        path = path or self.workdir / f"kubeconfig-{user.replace(':', '_')}"
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "kubetrain-test",
                    "cluster": {"server": self.server, "certificate-authority-data": _b64(self.ca.cert_pem)},
                }
            ],
            "users": [
                {
                    "name": user,
                    "user": {
                        "client-certificate-data": _b64(pair.cert_pem),
                        "client-key-data": _b64(pair.key_pem),
                    },
                }
            ],
            "contexts": [{"name": "kubetrain-test", "context": {"cluster": "kubetrain-test", "user": user}}],
            "current-context": "kubetrain-test",
        }
        path.write_text(yaml.safe_dump(cfg))
        path.chmod(0o600)
        return path

    # ------------------------------------------------------------------ steps
    def _pki(self) -> None:
        d = self.pki_dir
        self.ca = pki.make_ca("kubetrain-test-ca")
        self.ca.write(d, "ca")
        sans = (
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        )
        pki.serving_cert(self.ca, "kube-apiserver", sans, ("127.0.0.1", "10.96.0.1")).write(d, "apiserver")
        pki.serving_cert(self.ca, "kwok-kubelet").write(d, "kwok")
        pki.client_cert(self.ca, "kube-apiserver-kubelet-client", ("system:masters",)).write(
            d, "apiserver-kubelet-client"
        )
        sa_key = pki.new_key()
        pki.write_private_key(sa_key, d / "sa.key")
        pki.write_public_key(sa_key, d / "sa.pub")
        pki.client_cert(self.ca, ADMIN, ("system:masters",)).write(d, "admin")
        self.write_kubeconfig(ADMIN, ("system:masters",), self.kubeconfig)
        self.write_kubeconfig("system:kube-controller-manager", (), self.workdir / "kcm.kubeconfig")
        self.write_kubeconfig("system:kube-scheduler", (), self.workdir / "scheduler.kubeconfig")
        # kwok and the operator act as cluster admins (see docs/testenv.md).
        self.write_kubeconfig("kwok-controller", ("system:masters",), self.workdir / "kwok.kubeconfig")
        self.write_kubeconfig("training-operator", ("system:masters",), self.workdir / "operator.kubeconfig")

    def _start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Child:
        child = self.sup.start(name, argv, env=env, cwd=self.workdir)
        self._procs[name] = child
        self._argvs[name] = (argv, env)
        return child

    def _etcd(self) -> None:
        client, peer = (f"http://127.0.0.1:{self.ports[p]}" for p in ("etcd", "etcd_peer"))
        child = self._start(
            "etcd",
            [
                self.bins["etcd"],
                "--name=default",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=default={peer}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )
        wait_until(lambda: json.loads(http_get(f"{client}/health"))["health"] == "true", "etcd /health", 30, child)

    def _apiserver(self) -> None:
        d = self.pki_dir
        child = self._start(
            "kube-apiserver",
            [
                self.bins["kube-apiserver"],
                f"--etcd-servers=http://127.0.0.1:{self.ports['etcd']}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                # 1.37 refuses to start with a loopback address for the `kubernetes` Service's endpoints (which
                # the Endpoints validation never let it write anyway); nothing here reaches the API that way.
                "--endpoint-reconciler-type=none",
                f"--secure-port={self.ports['apiserver']}",
                f"--cert-dir={d}",
                f"--tls-cert-file={d / 'apiserver.crt'}",
                f"--tls-private-key-file={d / 'apiserver.key'}",
                f"--client-ca-file={d / 'ca.crt'}",
                f"--service-account-key-file={d / 'sa.pub'}",
                f"--service-account-signing-key-file={d / 'sa.key'}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--authorization-mode=Node,RBAC",
                "--allow-privileged=true",
                # logs/exec go to kwok's kubelet-like server, verified against our CA.
                "--kubelet-preferred-address-types=InternalIP",
                f"--kubelet-certificate-authority={d / 'ca.crt'}",
                f"--kubelet-client-certificate={d / 'apiserver-kubelet-client.crt'}",
                f"--kubelet-client-key={d / 'apiserver-kubelet-client.key'}",
                "--profiling=false",
                "--v=1",
            ],
        )
        wait_until(lambda: self._admin_get("/readyz") == "ok", "kube-apiserver /readyz", 90, child)

    def _controllers(self) -> None:
        common = ["--bind-address=127.0.0.1", "--leader-elect=false", "--profiling=false", "--v=1"]
        kcm = self._start(
            "kube-controller-manager",
            [
                self.bins["kube-controller-manager"],
                f"--kubeconfig={self.workdir / 'kcm.kubeconfig'}",
                f"--secure-port={self.ports['kcm']}",
                f"--cert-dir={self.workdir / 'kcm-certs'}",
                f"--root-ca-file={self.pki_dir / 'ca.crt'}",
                f"--service-account-private-key-file={self.pki_dir / 'sa.key'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--use-service-account-credentials=true",
                "--kube-api-qps=100",
                "--kube-api-burst=200",
                *common,
            ],
        )
        sched = self._start(
            "kube-scheduler",
            [
                self.bins["kube-scheduler"],
                f"--kubeconfig={self.workdir / 'scheduler.kubeconfig'}",
                f"--secure-port={self.ports['scheduler']}",
                f"--cert-dir={self.workdir / 'scheduler-certs'}",
                *common,
            ],
        )
        wait_until(
            lambda: http_get(f"https://127.0.0.1:{self.ports['kcm']}/healthz") == "ok",
            "kube-controller-manager /healthz",
            60,
            kcm,
        )
        wait_until(
            lambda: http_get(f"https://127.0.0.1:{self.ports['scheduler']}/healthz") == "ok",
            "kube-scheduler /healthz",
            60,
            sched,
        )
        # The serviceaccount controller creates "default" SAs; pods need them.
        core = kubernetes.client.CoreV1Api(self.api_client())
        wait_until(
            lambda: bool(core.read_namespaced_service_account("default", "default")),
            "default ServiceAccount",
            60,
            kcm,
        )

    def _crds(self) -> None:
        docs = [doc for path in (self.pytorchjob_crd, kwok.LOGS_CRD) for doc in yamlfiles.load_all(path) if doc]
        create_crds(self.api_client(), docs)

    def _kwok(self) -> None:
        core = kubernetes.client.CoreV1Api(self.api_client())
        for node in kwok.nodes():
            core.create_node(node)
        kwokdir = self.workdir / "kwok"
        kwokdir.mkdir()
        port = self.ports["kwok"]
        child = self._start(
            "kwok",
            [
                self.bins["kwok"],
                f"--kubeconfig={self.workdir / 'kwok.kubeconfig'}",
                f"--config={kwok.write_config(kwokdir)}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={kwok.NODE_SELECTOR_ANNOTATION}=fake",
                "--node-ip=127.0.0.1",
                f"--node-port={port}",
                f"--server-address=127.0.0.1:{port}",
                f"--tls-cert-file={self.pki_dir / 'kwok.crt'}",
                f"--tls-private-key-file={self.pki_dir / 'kwok.key'}",
                "--node-lease-duration-seconds=40",
                "--enable-crds=Logs",
            ],
            env=kwok.process_env(),
        )
        wait_until(lambda: http_get(f"https://127.0.0.1:{port}/healthz") == "ok", "kwok /healthz", 30, child)
        wait_until(lambda: _all_nodes_ready(core), "kwok nodes Ready", 60, child)

    def _operator(self) -> None:
        client = self.api_client()
        core = kubernetes.client.CoreV1Api(client)
        core.create_namespace({"metadata": {"name": operator.NAMESPACE}})
        ca, serving = operator.webhook_pki()
        core.create_namespaced_secret(operator.NAMESPACE, operator.secret(ca, serving))
        kubernetes.client.AdmissionregistrationV1Api(client).create_validating_webhook_configuration(
            operator.validating_webhook(self.ports["op_webhook"], ca)
        )
        ports = {
            "metrics": self.ports["op_metrics"],
            "probe": self.ports["op_probe"],
            "webhook": self.ports["op_webhook"],
        }
        argv, env = operator.command(
            self.bins["training-operator"],
            self.workdir / "operator.kubeconfig",
            ports,
            self.workdir,
            (ca, serving),
        )
        child = self._start("training-operator", argv, env)
        probe = f"http://127.0.0.1:{self.ports['op_probe']}/readyz"
        wait_until(lambda: http_get(probe) == "ok", "training-operator /readyz (certs + webhook server)", 60, child)
        if "--leader-elect" in argv:
            coord = kubernetes.client.CoordinationV1Api(client)
            wait_until(
                lambda: bool(
                    coord.read_namespaced_lease(operator.LEADER_ELECTION_ID, operator.NAMESPACE).spec.holder_identity
                ),
                "training-operator leader election",
                60,
                child,
            )
        self._wait_reconciling(client, child)

    def _wait_reconciling(self, client: kubernetes.client.ApiClient, child: Child) -> None:
        """Create a suspended PyTorchJob (through the webhook) and wait for its status."""
        crd = kubernetes.client.CustomObjectsApi(client)
        args = ("kubeflow.org", "v1", operator.NAMESPACE, "pytorchjobs")
        wait_until(
            lambda: bool(crd.create_namespaced_custom_object(*args, operator.warmup_job("warmup"))),
            "PyTorchJob create through the operator's webhook",
            30,
            child,
        )

        def reconciled() -> bool:
            job: dict[str, Any] = crd.get_namespaced_custom_object(*args, "warmup")
            return bool(job.get("status", {}).get("conditions"))

        wait_until(reconciled, "training-operator reconciling a PyTorchJob", 60, child)
        crd.delete_namespaced_custom_object(*args, "warmup")

    def _admin_get(self, path: str) -> str:
        ctx = ssl.create_default_context(cafile=str(self.pki_dir / "ca.crt"))
        ctx.load_cert_chain(str(self.pki_dir / "admin.crt"), str(self.pki_dir / "admin.key"))
        return http_get(self.server + path, ctx)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def http_get(url: str, ctx: ssl.SSLContext | None = None) -> str:
    if ctx is None and url.startswith("https"):
        # Health endpoints of kcm/scheduler/kwok, whose serving certs are
        # self-signed or ours; this only reads "ok" from loopback.
        ctx = ssl._create_unverified_context()
    with urllib.request.urlopen(url, timeout=5, context=ctx) as resp:
        return resp.read().decode().strip()


def _remove_orphaned_workdirs() -> None:
    """Temp dirs left by an owner that was SIGKILLed (its children died with it)."""
    for d in Path(tempfile.gettempdir()).glob(f"{WORKDIR_PREFIX}*"):
        try:
            owner = int((d / "owner.pid").read_text())
        except (OSError, ValueError):
            continue
        if not Path(f"/proc/{owner}").exists():
            shutil.rmtree(d, ignore_errors=True)


def established(crd: Any) -> bool:
    return any(c.type == "Established" and c.status == "True" for c in (crd.status.conditions or []))


def create_crds(api: Any, docs: Iterable[dict[str, Any]], names: list[str] | None = None) -> list[str]:
    """Create the CRDs all at once, then wait until each is Established (the apiserver establishes them side by
    side). Each name goes into `names` (returned) as soon as its CRD exists, so a caller's cleanup sees it."""
    ext = kubernetes.client.ApiextensionsV1Api(api)
    names = [] if names is None else names
    for doc in docs:
        ext.create_custom_resource_definition(doc)
        names.append(doc["metadata"]["name"])
    for name in names:
        wait_until(lambda n=name: established(ext.read_custom_resource_definition(n)), f"CRD {name} Established", 30)
    return names


def _all_nodes_ready(core: kubernetes.client.CoreV1Api) -> bool:
    items = core.list_node().items
    ready = [n for n in items if any(c.type == "Ready" and c.status == "True" for c in (n.status.conditions or []))]
    return len(items) == len(kwok.nodes()) and len(ready) == len(items)


__all__ = ["ControlPlane", "NotReady"]
