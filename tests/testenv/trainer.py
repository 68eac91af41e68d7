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
from pathlib import Path
from typing import Any

import yaml

from . import pki

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


def _hook(
    name: str, port: int, path: str, ca: pki.KeyPair, rule: tuple[str, str, str, list[str]]
) -> dict[str, Any]:
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
        "rules": [
            {"apiGroups": [group], "apiVersions": [version], "operations": operations, "resources": [resource]}
        ],
    }


def _config(kind: str, name: str, hooks: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name},
        "webhooks": hooks,
    }


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
