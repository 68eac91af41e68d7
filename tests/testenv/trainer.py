"""Kubeflow Trainer v2 (v2.3.0) and JobSet (v0.12.0) outside a cluster.

Both are controller-runtime managers whose config files can do what we need
without the tricks the training-operator v1 needs (see operator.py):

* Webhook certs are "provided externally", a mode both support upstream (it
  is what cert-manager installs use): internal cert management is off, and we
  write a serving cert for 127.0.0.1 into the cert dir and register the
  webhook configurations with `url: https://127.0.0.1:<port>/...` and our CA.
* The webhook servers, metrics and probes bind 127.0.0.1 (config `host`).
* Leader election gets its namespace from the config, so it is on.

Trainer's cert dir is controller-runtime's default, $TMPDIR/k8s-webhook-server/
serving-certs, so it gets its own TMPDIR. JobSet's is set in its config.
The webhook definitions below are upstream's (trainer manifests/base/webhook,
jobset config/components/webhook), with Service references replaced by URLs.
"""

from __future__ import annotations

import base64
import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import kubernetes
import yaml

from . import binaries, pki, yamlfiles
from .controlplane import create_crds, http_get
from .processes import Child, free_port, wait_until

if TYPE_CHECKING:
    from .controlplane import ControlPlane

TRAINER_NAMESPACE = "kubeflow-system"
JOBSET_NAMESPACE = "jobset-system"
TRAINER_GROUP = ("trainer.kubeflow.org", "v1alpha1")
JOBSET_GROUP = ("jobset.x-k8s.io", "v1alpha2")


def serving_pki(ca: pki.KeyPair, name: str) -> pki.KeyPair:
    return pki.serving_cert(ca, name, dns_names=(name,), ips=("127.0.0.1",))


def write_certs(cert_dir: Path, serving: pki.KeyPair) -> None:
    cert_dir.mkdir(parents=True, exist_ok=True)
    (cert_dir / "tls.crt").write_bytes(serving.cert_pem)
    (cert_dir / "tls.key").write_bytes(serving.key_pem)


def _hook(name: str, port: int, path: str, ca: pki.KeyPair, rule: tuple[str, str, str, list[str]]) -> dict[str, Any]:
    group, version, resource, operations = rule
    return {
        "name": name,
        "admissionReviewVersions": ["v1"],
        "clientConfig": {
            "url": f"https://127.0.0.1:{port}{path}",
            "caBundle": base64.b64encode(ca.cert_pem).decode(),
        },
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "rules": [{"apiGroups": [group], "apiVersions": [version], "operations": operations, "resources": [resource]}],
    }


def _config(kind: str, name: str, hooks: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name},
        "webhooks": hooks,
    }


def create_admission(client: kubernetes.client.ApiClient, objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Create Mutating/ValidatingWebhookConfigurations; returns those created (for delete_admission)."""
    api = kubernetes.client.AdmissionregistrationV1Api(client)
    done = []
    for obj in objs:
        if obj["kind"] == "MutatingWebhookConfiguration":
            api.create_mutating_webhook_configuration(obj)
        else:
            api.create_validating_webhook_configuration(obj)
        done.append(obj)
    return done


def delete_admission(client: kubernetes.client.ApiClient, objs: list[dict[str, Any]]) -> None:
    api = kubernetes.client.AdmissionregistrationV1Api(client)
    for obj in objs:
        delete = (
            api.delete_mutating_webhook_configuration
            if obj["kind"].startswith("Mutating")
            else api.delete_validating_webhook_configuration
        )
        with contextlib.suppress(kubernetes.client.ApiException):
            delete(obj["metadata"]["name"])


def jobset_webhooks(port: int, ca: pki.KeyPair) -> list[dict[str, Any]]:
    jobsets = (*JOBSET_GROUP, "jobsets")
    pods = ("", "v1", "pods", ["CREATE"])
    jobset_pods = {"matchExpressions": [{"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}]}
    mpod = _hook("mpod.kb.io", port, "/mutate--v1-pod", ca, pods) | {"objectSelector": jobset_pods}
    vpod = _hook("vpod.kb.io", port, "/validate--v1-pod", ca, pods) | {"objectSelector": jobset_pods}
    return [
        _config(
            "MutatingWebhookConfiguration",
            "jobset-mutating-webhook-configuration",
            [_hook("mjobset.kb.io", port, "/mutate-jobset-x-k8s-io-v1alpha2-jobset", ca, (*jobsets, ["CREATE"])), mpod],
        ),
        _config(
            "ValidatingWebhookConfiguration",
            "jobset-validating-webhook-configuration",
            [
                _hook(
                    "vjobset.kb.io",
                    port,
                    "/validate-jobset-x-k8s-io-v1alpha2-jobset",
                    ca,
                    (*jobsets, ["CREATE", "UPDATE"]),
                ),
                vpod,
            ],
        ),
    ]


def trainer_webhooks(port: int, ca: pki.KeyPair) -> list[dict[str, Any]]:
    group, version = TRAINER_GROUP
    cu = ["CREATE", "UPDATE"]
    opt_out = {
        "matchExpressions": [
            {"key": "trainer.kubeflow.org/webhook-validation", "operator": "NotIn", "values": ["disabled"]}
        ]
    }

    def validator(resource: str, kind: str) -> dict[str, Any]:
        path = f"/validate-trainer-kubeflow-org-{version}-{kind}"
        return _hook(f"validator.{kind}.trainer.kubeflow.org", port, path, ca, (group, version, resource, cu))

    return [
        _config(
            "MutatingWebhookConfiguration",
            "defaulter.trainer.kubeflow.org",
            [
                _hook(
                    "defaulter.trainjob.trainer.kubeflow.org",
                    port,
                    f"/mutate-trainer-kubeflow-org-{version}-trainjob",
                    ca,
                    (group, version, "trainjobs", cu),
                )
            ],
        ),
        _config(
            "ValidatingWebhookConfiguration",
            "validator.trainer.kubeflow.org",
            [
                validator("clustertrainingruntimes", "clustertrainingruntime") | {"objectSelector": opt_out},
                validator("trainingruntimes", "trainingruntime") | {"objectSelector": opt_out},
                validator("trainjobs", "trainjob"),
            ],
        ),
    ]


def jobset_config(ports: dict[str, int], cert_dir: Path) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
            "kind": "Configuration",
            "leaderElection": {
                "leaderElect": True,
                "resourceName": "6d4f6a47.jobset.x-k8s.io",
                "resourceNamespace": JOBSET_NAMESPACE,
            },
            "internalCertManagement": {"enable": False},
            "webhook": {"port": ports["webhook"], "host": "127.0.0.1", "certDir": str(cert_dir)},
            "metrics": {"bindAddress": f"127.0.0.1:{ports['metrics']}"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{ports['probe']}"},
        }
    )


def trainer_config(ports: dict[str, int]) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "config.trainer.kubeflow.org/v1alpha1",
            "kind": "Configuration",
            "health": {"healthProbeBindAddress": f"127.0.0.1:{ports['probe']}"},
            "metrics": {"bindAddress": f"127.0.0.1:{ports['metrics']}", "secureServing": False},
            "webhook": {"port": ports["webhook"], "host": "127.0.0.1"},
            "leaderElection": {
                "leaderElect": True,
                "resourceName": "trainer.kubeflow.org",
                "resourceNamespace": TRAINER_NAMESPACE,
                "leaseDuration": "15s",
                "renewDeadline": "10s",
                "retryPeriod": "2s",
            },
            "certManagement": {"enable": False},
        }
    )


class TrainerStack:
    """JobSet + Trainer v2 added to (and later removed from) a running ControlPlane.

    Opt-in, because tests of the base cluster expect no TrainJob CRD.
    """

    def __init__(self, cp: ControlPlane) -> None:
        self.cp = cp
        self.bins = {n: binaries.find(n) for n in ("jobset", "trainer-controller-manager")}
        self.manifests = binaries.cache_bin_dir().parent / "manifests"
        missing = [n for n, p in self.bins.items() if p is None]
        if missing or not (self.manifests / "jobset").is_dir():
            raise binaries.MissingBinaries(
                f"Trainer v2/JobSet not prepared ({', '.join(missing) or 'manifests'} missing); {binaries.PREPARE_HINT}"
            )
        self.ports = {
            n: free_port() for n in ("js_webhook", "js_metrics", "js_probe", "tr_webhook", "tr_metrics", "tr_probe")
        }
        self.children: list[Child] = []
        self.admission: list[dict[str, Any]] = []

    def crd_files(self) -> list[Path]:
        return sorted((self.manifests / "jobset").glob("*.yaml")) + sorted(
            (self.manifests / "trainer").glob("trainer.kubeflow.org_*.yaml")
        )

    def start(self) -> TrainerStack:
        try:
            self._crds()
            self._jobset()
            self._trainer()
            runtime = yamlfiles.load(self.manifests / "trainer" / "torch_distributed.yaml")
            # Created through the trainer's validating webhook: proves it serves.
            wait_until(
                lambda: bool(
                    self._custom().create_cluster_custom_object(*TRAINER_GROUP, "clustertrainingruntimes", runtime)
                ),
                "ClusterTrainingRuntime torch-distributed through the trainer webhook",
                30,
                self.children[-1],
            )
        except BaseException:
            self.stop()
            raise
        return self

    def _custom(self) -> kubernetes.client.CustomObjectsApi:
        return kubernetes.client.CustomObjectsApi(self.cp.api_client())

    def _crds(self) -> None:
        create_crds(self.cp.api_client(), [yamlfiles.load(path) for path in self.crd_files()])

    def _admission(self, objs: list[dict[str, Any]]) -> None:
        self.admission += create_admission(self.cp.api_client(), objs)

    def _manager(self, name: str, namespace: str, prefix: str, argv: list[str], env: dict[str, str]) -> None:
        core = kubernetes.client.CoreV1Api(self.cp.api_client())
        coord = kubernetes.client.CoordinationV1Api(self.cp.api_client())
        try:
            core.create_namespace({"metadata": {"name": namespace}})
        except kubernetes.client.ApiException as exc:
            if exc.status != 409:
                raise
            # An earlier test module's stack (stop() keeps the namespace): drop its leader Lease, or the
            # wait below would see the stale one while the new manager still waits for it to expire.
            coord.delete_collection_namespaced_lease(namespace)
        child = self.cp.sup.start(
            name, argv, env={"KUBECONFIG": str(self.cp.workdir / "operator.kubeconfig"), **env}, cwd=self.cp.workdir
        )
        self.children.append(child)
        probe = f"http://127.0.0.1:{self.ports[prefix + '_probe']}/readyz"
        wait_until(lambda: http_get(probe) == "ok", f"{name} /readyz", 60, child)
        wait_until(lambda: bool(coord.list_namespaced_lease(namespace).items), f"{name} leader election", 60, child)

    def _component_ports(self, prefix: str) -> dict[str, int]:
        return {name: self.ports[f"{prefix}_{name}"] for name in ("webhook", "metrics", "probe")}

    def _jobset(self) -> None:
        certs = self.cp.workdir / "jobset-certs"
        write_certs(certs, serving_pki(self.cp.ca, "jobset-webhook-service.jobset-system.svc"))
        self._admission(jobset_webhooks(self.ports["js_webhook"], self.cp.ca))
        config = self.cp.workdir / "jobset-config.yaml"
        ports = self._component_ports("js")
        config.write_text(jobset_config(ports, certs))
        argv = [
            str(self.bins["jobset"]),
            f"--config={config}",
            f"--kubeconfig={self.cp.workdir / 'operator.kubeconfig'}",
        ]
        self._manager("jobset", JOBSET_NAMESPACE, "js", argv, {})

    def _trainer(self) -> None:
        tmp = self.cp.workdir / "trainer-tmp"
        write_certs(
            tmp / "k8s-webhook-server" / "serving-certs",
            serving_pki(self.cp.ca, "kubeflow-trainer-controller-manager.kubeflow-system.svc"),
        )
        self._admission(trainer_webhooks(self.ports["tr_webhook"], self.cp.ca))
        config = self.cp.workdir / "trainer-config.yaml"
        ports = self._component_ports("tr")
        config.write_text(trainer_config(ports))
        argv = [
            str(self.bins["trainer-controller-manager"]),
            f"--config={config}",
            f"--kubeconfig={self.cp.workdir / 'operator.kubeconfig'}",
        ]
        # controller-runtime's default cert dir is $TMPDIR/k8s-webhook-server/serving-certs.
        self._manager("trainer", TRAINER_NAMESPACE, "tr", argv, {"TMPDIR": str(tmp)})

    def stop(self) -> None:
        """Remove everything again, so the next test module sees the base cluster."""
        custom, client = self._custom(), self.cp.api_client()
        with contextlib.suppress(kubernetes.client.ApiException):
            # While the controllers still run, so their finalizers get removed.
            delete_in_every_namespace(custom, *TRAINER_GROUP, "trainjobs")
            custom.delete_collection_cluster_custom_object(*TRAINER_GROUP, "clustertrainingruntimes")
        delete_admission(client, self.admission)
        for child in reversed(self.children):
            self.cp.sup.stop_child(child)
        ext = kubernetes.client.ApiextensionsV1Api(client)
        names = [yamlfiles.load(path)["metadata"]["name"] for path in self.crd_files()]
        for name in names:  # all at once: the apiserver cleans each CRD's storage up in the background
            with contextlib.suppress(kubernetes.client.ApiException):
                ext.delete_custom_resource_definition(name)
        for name in names:
            wait_until(lambda n=name: not crd_exists(ext, n), f"CRD {name} deleted", 60)


def delete_in_every_namespace(custom: kubernetes.client.CustomObjectsApi, group: str, version: str,
                              plural: str) -> None:
    """Every object of a namespaced custom kind, by one list across all namespaces: a delete in each namespace
    took seconds at the end of a module, once the session had made a few hundred."""
    found = custom.list_cluster_custom_object(group, version, plural)["items"]
    for namespace in sorted({obj["metadata"]["namespace"] for obj in found}):
        custom.delete_collection_namespaced_custom_object(group, version, namespace, plural)


def crd_exists(ext: kubernetes.client.ApiextensionsV1Api, name: str) -> bool:
    try:
        ext.read_custom_resource_definition(name)
    except kubernetes.client.ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True
