"""Kueue (v0.19.2, built by prepare.sh) added to (and later removed from) a running ControlPlane.

Like Trainer v2 and JobSet (trainer.py), Kueue is a controller-runtime manager whose config file does
what we need: internal cert management is off, a serving cert for 127.0.0.1 signed by the cluster CA is
written to its cert dir, and the webhooks are registered with loopback URLs. The CRDs and webhook
configurations are upstream's (config/components of the same pinned module, copied by prepare.sh), with
these changes:

* the conversion webhook that upstream's kustomize patches add to six CRDs (v1beta1 <-> v1beta2) points
  at the loopback URL instead of the webhook Service;
* only the webhooks of the enabled integrations and of Kueue's own kinds are registered: an upstream
  webhook for pods or Deployments with failurePolicy Fail would intercept every test's pods;
* the visibility API server (an aggregated API, VisibilityOnDemand) is off; kubetrain computes a
  pending job's position from the Workloads themselves;
* DRA devices are counted (resources.deviceClassMappings): the test DeviceClasses as resource
  `DRA_RESOURCE`, which ClusterQueue `DRA_QUEUE` gives quota for. The configuration is also stored as
  upstream's manifests do (ConfigMap kueue-system/kueue-manager-config), where kubetrain reads the mapping.

The queue set-up (flavors, ClusterQueues in a cohort, LocalQueues) is in `QueueSetup`.
"""

from __future__ import annotations

import base64
import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import kubernetes
import yaml

from . import binaries, kwok, yamlfiles
from .controlplane import create_crds, http_get
from .processes import Child, free_port, wait_until
from .trainer import (
    crd_exists,
    create_admission,
    delete_admission,
    delete_in_every_namespace,
    serving_pki,
    write_certs,
)

if TYPE_CHECKING:
    from .controlplane import ControlPlane

NAMESPACE = "kueue-system"
GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
INTEGRATIONS = ("kubeflow.org/pytorchjob", "trainer.kubeflow.org/trainjob", "jobset.x-k8s.io/jobset")
# (apiGroup, resource) of the webhooks kept from upstream's manifests.yaml.
WEBHOOK_RESOURCES = {
    ("kubeflow.org", "pytorchjobs"),
    ("trainer.kubeflow.org", "trainjobs"),
    ("jobset.x-k8s.io", "jobsets"),
    *((GROUP, r) for r in ("clusterqueues", "cohorts", "localqueues", "resourceflavors", "workloads")),
}
CONVERTED = {"clusterqueues", "cohorts", "localqueues", "multikueueclusters", "resourceflavors", "workloads"}
PODS_READY_TIMEOUT_S = 8  # waitForPodsReady: how long admitted pods may take to be Ready before eviction
DRA_RESOURCE = "dra.kubetrain.test/gpu"  # Kueue's logical resource for the test DeviceClasses' devices
DRA_DEVICE_CLASSES = ("gpu.kubetrain.test", "gpu.example.com")  # tests/jobs, tests/testenv/dradriver.py


def manifests_dir() -> Path:
    return binaries.cache_bin_dir().parent / "kueue-manifests"


def config(ports: dict[str, int], cert_dir: Path) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "namespace": NAMESPACE,
            "health": {"healthProbeBindAddress": f"127.0.0.1:{ports['probe']}"},
            "metrics": {"bindAddress": f"127.0.0.1:{ports['metrics']}"},
            "webhook": {"port": ports["webhook"], "host": "127.0.0.1", "certDir": str(cert_dir)},
            "leaderElection": {
                "leaderElect": True,
                "resourceName": "c1f6bfd2.kueue.x-k8s.io",
                "resourceNamespace": NAMESPACE,
                "leaseDuration": "15s",
                "renewDeadline": "10s",
                "retryPeriod": "2s",
            },
            "internalCertManagement": {"enable": False},
            "clientConnection": {"qps": 300, "burst": 500},
            # Gang admission: pods that are not all Ready within the timeout get the Workload evicted
            # (reason PodsReadyTimeout) and requeued after a backoff.
            "waitForPodsReady": {
                "timeout": f"{PODS_READY_TIMEOUT_S}s",
                "blockAdmission": False,
                "requeuingStrategy": {"timestamp": "Eviction", "backoffBaseSeconds": 1, "backoffMaxSeconds": 5},
            },
            "integrations": {"frameworks": list(INTEGRATIONS)},
            "featureGates": {"VisibilityOnDemand": False},
            "resources": {"deviceClassMappings": [{"name": DRA_RESOURCE,
                                                   "deviceClassNames": list(DRA_DEVICE_CLASSES)}]},
        }
    )


def _webhook_kept(hook: dict[str, Any]) -> bool:
    return any(
        (group, resource) in WEBHOOK_RESOURCES
        for rule in hook.get("rules", [])
        for group in rule.get("apiGroups", [])
        for resource in rule.get("resources", [])
    )


def _client_config(port: int, path: str, ca_pem: bytes) -> dict[str, Any]:
    return {"url": f"https://127.0.0.1:{port}{path}", "caBundle": base64.b64encode(ca_pem).decode()}


def webhook_configurations(port: int, ca_pem: bytes) -> list[dict[str, Any]]:
    """Upstream's Mutating/ValidatingWebhookConfiguration, narrowed and pointed at 127.0.0.1:port."""
    out = []
    for doc in yamlfiles.load_all(manifests_dir() / "manifests.yaml"):
        hooks = [h for h in doc["webhooks"] if _webhook_kept(h)]
        for hook in hooks:
            hook["clientConfig"] = _client_config(port, hook["clientConfig"]["service"]["path"], ca_pem)
        doc["metadata"] = {"name": f"kueue-{doc['metadata']['name']}"}
        doc["webhooks"] = hooks
        out.append(doc)
    return out


def crds(port: int, ca_pem: bytes) -> list[dict[str, Any]]:
    out = []
    for path in sorted(manifests_dir().glob("kueue.x-k8s.io_*.yaml")):
        crd = yamlfiles.load(path)
        if crd["spec"]["names"]["plural"] in CONVERTED:
            crd["spec"]["conversion"] = {
                "strategy": "Webhook",
                "webhook": {
                    "clientConfig": _client_config(port, "/convert", ca_pem),
                    "conversionReviewVersions": ["v1"],
                },
            }
        out.append(crd)
    return out


METRICS_CERT_DIR = "/etc/kueue/metrics/certs"


def metrics_cert_mount(cert_dir: Path) -> list[str]:
    """A prefix for Kueue's argv: with internal cert management off, Kueue v0.19 reads its metrics serving
    cert from the hard-coded /etc/kueue/metrics/certs (cmd/kueue/main.go). Rather than write certs there,
    Kueue runs in a private mount namespace where our cert dir is bind-mounted on that path; only the empty
    mount point is created on the host (root, as the harness's real node already needs)."""
    script = f'mkdir -p {METRICS_CERT_DIR} && mount --bind "$0" {METRICS_CERT_DIR} && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, str(cert_dir)]


class Kueue:
    """The Kueue manager with its CRDs and webhooks on a running ControlPlane, plus a queue set-up."""

    def __init__(self, cp: ControlPlane) -> None:
        self.cp = cp
        self.bin = binaries.find("kueue")
        if self.bin is None or not (manifests_dir() / "manifests.yaml").is_file():
            raise binaries.MissingBinaries(
                f"Kueue not prepared ({'kueue' if self.bin is None else 'manifests'} missing); {binaries.PREPARE_HINT}"
            )
        self.ports = {n: free_port() for n in ("webhook", "metrics", "probe")}
        self.child: Child | None = None
        self.admission: list[dict[str, Any]] = []
        self.crd_names: list[str] = []
        self.queues = QueueSetup(cp)

    def _api(self) -> kubernetes.client.ApiClient:
        return self.cp.api_client()

    def start(self) -> Kueue:
        try:
            self._crds()
            self._process()
            self._admission()
            self.queues.create()
        except BaseException:
            self.stop()
            raise
        return self

    def _crds(self) -> None:
        create_crds(self._api(), crds(self.ports["webhook"], self.cp.ca.cert_pem), self.crd_names)

    def _process(self) -> None:
        core = kubernetes.client.CoreV1Api(self._api())
        try:
            core.create_namespace({"metadata": {"name": NAMESPACE}})
        except kubernetes.client.ApiException as exc:
            if exc.status != 409:
                raise
            # An earlier module's Kueue left its leader Lease; the new manager would wait for it to expire.
            kubernetes.client.CoordinationV1Api(self._api()).delete_collection_namespaced_lease(NAMESPACE)
        certs = self.cp.workdir / "kueue-certs"
        write_certs(certs, serving_pki(self.cp.ca, f"kueue-webhook-service.{NAMESPACE}.svc"))
        cfg = self.cp.workdir / "kueue-config.yaml"
        cfg.write_text(config(self.ports, certs))
        _store_config(core, cfg.read_text())
        kubeconfig = self.cp.workdir / "operator.kubeconfig"
        argv = [*metrics_cert_mount(certs), str(self.bin), f"--config={cfg}", f"--kubeconfig={kubeconfig}"]
        self.child = self.cp.sup.start("kueue", argv, env={"KUBECONFIG": str(kubeconfig)}, cwd=self.cp.workdir)
        probe = f"http://127.0.0.1:{self.ports['probe']}/readyz"
        wait_until(lambda: http_get(probe) == "ok", "kueue /readyz", 90, self.child)

    def _admission(self) -> None:
        self.admission += create_admission(self._api(), webhook_configurations(self.ports["webhook"],
                                                                                self.cp.ca.cert_pem))

    def log(self) -> str:
        return self.child.log_tail(200) if self.child else ""

    def stop(self) -> None:
        """Remove everything again, so the next test module sees a cluster without Kueue."""
        client = self._api()
        with contextlib.suppress(kubernetes.client.ApiException):
            self.queues.delete()
        delete_admission(client, self.admission)
        if self.child is not None:
            self.cp.sup.stop_child(self.child)
        ext = kubernetes.client.ApiextensionsV1Api(client)
        for name in self.crd_names:
            _drop_finalizers(kubernetes.client.CustomObjectsApi(client), ext.read_custom_resource_definition(name))
            with contextlib.suppress(kubernetes.client.ApiException):
                ext.delete_custom_resource_definition(name)
        for name in self.crd_names:
            wait_until(lambda n=name: not crd_exists(ext, n), f"CRD {name} to be deleted", 60)


def _store_config(core: kubernetes.client.CoreV1Api, text: str) -> None:
    """The manager's configuration where upstream's manifests keep it (and kubetrain reads its DRA mapping)."""
    body = {"metadata": {"name": "kueue-manager-config"}, "data": {"controller_manager_config.yaml": text}}
    try:
        core.create_namespaced_config_map(NAMESPACE, body)
    except kubernetes.client.ApiException as exc:
        if exc.status != 409:
            raise
        core.replace_namespaced_config_map("kueue-manager-config", NAMESPACE, body)


def _drop_finalizers(custom: kubernetes.client.CustomObjectsApi, crd: Any) -> None:
    """Clear the finalizers Kueue put on its objects (ResourceFlavors, ClusterQueues, Workloads: "resource
    in use"). Only the running manager removes them, and it is stopped now; a CRD whose objects keep a
    finalizer is never deleted, and the next module's Kueue could not create it again."""
    plural, version = crd.spec.names.plural, next(v.name for v in crd.spec.versions if v.storage)
    for obj in custom.list_cluster_custom_object(GROUP, version, plural)["items"]:
        meta = obj["metadata"]
        if not meta.get("finalizers"):
            continue
        patch = {"metadata": {"finalizers": None}}
        with contextlib.suppress(kubernetes.client.ApiException):  # already gone
            if "namespace" in meta:
                custom.patch_namespaced_custom_object(GROUP, version, meta["namespace"], plural, meta["name"], patch)
            else:
                custom.patch_cluster_custom_object(GROUP, version, plural, meta["name"], patch)


# ---- the queues --------------------------------------------------------------------------------------------
COHORT = "gpus"
# ClusterQueue -> (nominal GPUs, borrowing limit or None for unlimited within the cohort, lending limit)
CLUSTER_QUEUES: dict[str, tuple[int, int | None, int | None]] = {
    "team-a": (8, 8, None),  # may borrow up to 8 GPUs of team-b's unused quota
    "team-b": (8, 0, 8),  # never borrows; lends all of its quota
}
FLAVOR_OF_PRODUCT = {kwok.GPU_PRODUCT: "h100"}
# A CPU-only ClusterQueue (no GPU quota, outside the cohort) whose flavor has no node labels, so that its
# jobs' pods can land on the real node (the h100 flavor's label keeps pods on the kwok GPU nodes).
CPU_QUEUE, CPU_FLAVOR = "cpu", "cpu-any"
# A ClusterQueue with quota for DRA devices (DRA_RESOURCE), in the GPU nodes' flavor, outside the cohort.
DRA_QUEUE, DRA_QUOTA = "dra", 4


def flavors() -> list[dict[str, Any]]:
    """A ResourceFlavor per GPU type of the kwok nodes (their accelerator label), and one for CPU (no labels)."""
    out = [
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ResourceFlavor",
            "metadata": {"name": name},
            "spec": {"nodeLabels": {"cloud.google.com/gke-accelerator": product}},
        }
        for product, name in FLAVOR_OF_PRODUCT.items()
    ]
    out.append({"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceFlavor", "metadata": {"name": CPU_FLAVOR}})
    return out


def cluster_queue(name: str, gpus: int, borrowing: int | None, lending: int | None) -> dict[str, Any]:
    gpu: dict[str, Any] = {"name": kwok.GPU_RESOURCE, "nominalQuota": gpus}
    if borrowing is not None:
        gpu["borrowingLimit"] = borrowing
    if lending is not None:
        gpu["lendingLimit"] = lending
    resources = [{"name": "cpu", "nominalQuota": 1000}, {"name": "memory", "nominalQuota": "10Ti"}, gpu]
    flavor = next(iter(FLAVOR_OF_PRODUCT.values()))
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "cohortName": COHORT,
            "namespaceSelector": {},
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory", kwok.GPU_RESOURCE],
                    "flavors": [{"name": flavor, "resources": resources}],
                }
            ],
        },
    }


def cpu_cluster_queue() -> dict[str, Any]:
    resources = [{"name": "cpu", "nominalQuota": 8}, {"name": "memory", "nominalQuota": "64Gi"}]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ClusterQueue",
        "metadata": {"name": CPU_QUEUE},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [{"coveredResources": ["cpu", "memory"],
                                "flavors": [{"name": CPU_FLAVOR, "resources": resources}]}],
        },
    }


def dra_cluster_queue() -> dict[str, Any]:
    resources = [{"name": "cpu", "nominalQuota": 1000}, {"name": "memory", "nominalQuota": "10Ti"},
                 {"name": DRA_RESOURCE, "nominalQuota": DRA_QUOTA}]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ClusterQueue",
        "metadata": {"name": DRA_QUEUE},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [{"coveredResources": ["cpu", "memory", DRA_RESOURCE],
                                "flavors": [{"name": next(iter(FLAVOR_OF_PRODUCT.values())), "resources": resources}]}],
        },
    }


def local_queue(namespace: str, name: str, cluster_queue: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cluster_queue},
    }


QUEUES = (*CLUSTER_QUEUES, CPU_QUEUE, DRA_QUEUE)


class QueueSetup:
    """Flavors and ClusterQueues (created with Kueue), LocalQueues per test namespace (`add_local_queues`)."""

    def __init__(self, cp: ControlPlane) -> None:
        self.cp = cp

    def _custom(self) -> kubernetes.client.CustomObjectsApi:
        return kubernetes.client.CustomObjectsApi(self.cp.api_client())

    def create(self) -> None:
        custom = self._custom()
        # Through Kueue's validating webhooks: retried until its webhook server serves.
        for flavor in flavors():
            wait_until(
                lambda f=flavor: bool(custom.create_cluster_custom_object(GROUP, VERSION, "resourceflavors", f)),
                "ResourceFlavor through Kueue's webhook",
                30,
            )
        for name, (gpus, borrowing, lending) in CLUSTER_QUEUES.items():
            custom.create_cluster_custom_object(
                GROUP, VERSION, "clusterqueues", cluster_queue(name, gpus, borrowing, lending)
            )
        custom.create_cluster_custom_object(GROUP, VERSION, "clusterqueues", cpu_cluster_queue())
        custom.create_cluster_custom_object(GROUP, VERSION, "clusterqueues", dra_cluster_queue())
        wait_until(lambda: all(self.active(n) for n in QUEUES), "ClusterQueues Active", 30)

    def active(self, name: str) -> bool:
        cq = self._custom().get_cluster_custom_object(GROUP, VERSION, "clusterqueues", name)
        conds = cq.get("status", {}).get("conditions", [])
        return any(c["type"] == "Active" and c["status"] == "True" for c in conds)

    def add_local_queues(self, namespace: str) -> dict[str, str]:
        """A LocalQueue per ClusterQueue in `namespace` (named like it); returns LocalQueue -> ClusterQueue."""
        custom = self._custom()
        for name in QUEUES:
            custom.create_namespaced_custom_object(
                GROUP, VERSION, namespace, "localqueues", local_queue(namespace, name, name)
            )
        return {name: name for name in QUEUES}

    def delete(self) -> None:
        custom = self._custom()
        for plural in ("localqueues", "workloads"):
            delete_in_every_namespace(custom, GROUP, VERSION, plural)
        custom.delete_collection_cluster_custom_object(GROUP, VERSION, "clusterqueues")
        custom.delete_collection_cluster_custom_object(GROUP, VERSION, "resourceflavors")
