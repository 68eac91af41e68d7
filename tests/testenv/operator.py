"""Running the Kubeflow training-operator v1 (v1.9.4) outside a cluster.

Three things assume a pod, and each is handled so users' behaviour is kept:

* Webhook certs. The operator's cert-controller rotator keeps its CA and
  serving cert in Secret kubeflow/training-operator-webhook-cert, writes them
  to the hard-coded /tmp/k8s-webhook-server/serving-certs, and injects the CA
  into ValidatingWebhookConfiguration validator.training-operator.kubeflow.org.
  We pre-create that Secret with a CA and cert of exactly the shape the
  rotator accepts (CA DNS name "training-operator-ca", serving cert for
  training-operator.kubeflow.svc, RSA/PKCS#1) plus an IP SAN 127.0.0.1, and
  register the webhook with `url: https://127.0.0.1:<port>/...` instead of a
  Service reference (a Service would make the apiserver dial a ClusterIP).
  The rotator finds the cert valid, keeps it and keeps the caBundle
  injected. It does not write the files: in a cluster the Deployment mounts
  the Secret at /tmp/k8s-webhook-server/serving-certs, and the operator waits
  for them there. We write them, as the kubelet would. So the validating
  webhook is live, as in a cluster.
* Leader election. controller-runtime reads its lease namespace from
  /var/run/secrets/kubernetes.io/serviceaccount/namespace.
* The shared /tmp cert dir would clash between concurrent test sessions.

When we may (root, `unshare` works) the operator runs in a private mount
namespace with a tmpfs over /run holding that namespace file and its own
/tmp/k8s-webhook-server (the empty mount point is left on the host),
and runs with --leader-elect. Otherwise it runs without leader election, as the
upstream Deployment does by default.
"""

from __future__ import annotations

import base64
import functools
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from . import binaries, pki

NAMESPACE = "kubeflow"
SECRET_NAME = "training-operator-webhook-cert"
SERVICE_NAME = "training-operator"
WEBHOOK_CONFIG_NAME = "validator.training-operator.kubeflow.org"
LEADER_ELECTION_ID = "1ca428e5.training-operator.kubeflow.org"
CA_NAME = "training-operator-ca"
INIT_TEMPLATE = Path(__file__).resolve().parent / "initimage" / "initContainer.yaml"

_MOUNT_WRAPPER = r"""
set -e
run=$(readlink -f /var/run)
mount -t tmpfs -o size=1m,mode=755 kubetrain-run "$run"
mkdir -p "$run/secrets/kubernetes.io/serviceaccount"
printf %s "$OPERATOR_NAMESPACE" > "$run/secrets/kubernetes.io/serviceaccount/namespace"
mkdir -p /tmp/k8s-webhook-server
mount --bind "$OPERATOR_TMP" /tmp/k8s-webhook-server
exec "$@"
"""


@functools.cache
def can_isolate() -> bool:
    """True if we can give the operator a private mount namespace."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"], capture_output=True, check=False)
    return probe.returncode == 0


def webhook_pki() -> tuple[pki.KeyPair, pki.KeyPair]:
    ca = pki.make_ca(CA_NAME, rsa_key=True, dns_names=(CA_NAME,))
    dns = f"{SERVICE_NAME}.{NAMESPACE}.svc"
    # >90 days: the rotator renews anything expiring within its 90-day lookahead.
    serving = pki.serving_cert(ca, dns, dns_names=(dns,), ips=("127.0.0.1",), rsa_key=True, days=3650)
    return ca, serving


def secret(ca: pki.KeyPair, serving: pki.KeyPair) -> dict[str, Any]:
    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": SECRET_NAME, "namespace": NAMESPACE},
        "data": {
            "ca.crt": b64(ca.cert_pem),
            "ca.key": b64(ca.key_pem),
            "tls.crt": b64(serving.cert_pem),
            "tls.key": b64(serving.key_pem),
        },
    }


def validating_webhook(port: int, ca: pki.KeyPair) -> dict[str, Any]:
    """Upstream manifests/base/webhook, pytorchjob entry, with a loopback URL."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": WEBHOOK_CONFIG_NAME},
        "webhooks": [
            {
                "name": "validator.pytorchjob.training-operator.kubeflow.org",
                "admissionReviewVersions": ["v1"],
                "clientConfig": {
                    "url": f"https://127.0.0.1:{port}/validate-kubeflow-org-v1-pytorchjob",
                    "caBundle": base64.b64encode(ca.cert_pem).decode(),
                },
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "rules": [
                    {
                        "apiGroups": ["kubeflow.org"],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["pytorchjobs"],
                    }
                ],
            }
        ],
    }


def mount_secret(cert_dir: Path, ca: pki.KeyPair, serving: pki.KeyPair) -> None:
    """What the Deployment's Secret volume would put in the operator's cert dir."""
    cert_dir.mkdir(parents=True, exist_ok=True)
    for name, data in (("ca.crt", ca.cert_pem), ("tls.crt", serving.cert_pem), ("tls.key", serving.key_pem)):
        (cert_dir / name).write_bytes(data)


def command(
    binary: Path,
    kubeconfig: Path,
    ports: dict[str, int],
    workdir: Path,
    certs: tuple[pki.KeyPair, pki.KeyPair],
) -> tuple[list[str], dict[str, str]]:
    args = [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        "--enable-scheme=pytorchjob",  # only the PyTorchJob CRD is installed
        f"--metrics-bind-address=127.0.0.1:{ports['metrics']}",
        f"--health-probe-bind-address=127.0.0.1:{ports['probe']}",
        f"--webhook-server-port={ports['webhook']}",
        f"--webhook-service-name={SERVICE_NAME}",
        f"--webhook-secret-name={SECRET_NAME}",
        "--zap-log-level=info",
        # Workers' init container waits for the master's DNS name with busybox; upstream's default
        # alpine:3.10 cannot be pulled here, so the real node gets an image built on the machine.
        f"--pytorch-init-container-image={binaries.versions()['INIT_IMAGE']}",
        # ... and a template whose shell ends on SIGTERM (upstream's waits out the pod's grace period).
        f"--pytorch-init-container-template-file={INIT_TEMPLATE}",
    ]
    env = {
        "MY_POD_NAMESPACE": NAMESPACE,
        "MY_POD_NAME": "training-operator-local",
        "KUBECONFIG": str(kubeconfig),
    }
    if not can_isolate():
        # Shared with any other session on this machine running the operator.
        mount_secret(Path("/tmp/k8s-webhook-server/serving-certs"), *certs)
        return args, env
    tmp = workdir / "operator-tmp"
    mount_secret(tmp / "serving-certs", *certs)
    env |= {"OPERATOR_TMP": str(tmp), "OPERATOR_NAMESPACE": NAMESPACE}
    wrapper = ["unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", _MOUNT_WRAPPER, "sh"]
    return [*wrapper, *args, "--leader-elect", f"--leader-election-id={LEADER_ELECTION_ID}"], env


def warmup_job(name: str) -> dict[str, Any]:
    """A suspended PyTorchJob: the operator reconciles it without making pods."""
    container = {"name": "pytorch", "image": "kubetrain.test/warmup:0", "command": ["true"]}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "runPolicy": {"suspend": True},
            "pytorchReplicaSpecs": {
                "Master": {
                    "replicas": 1,
                    "restartPolicy": "Never",
                    "template": {"spec": {"containers": [container]}},
                }
            },
        },
    }
