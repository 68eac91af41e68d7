"""The idempotent steps of `cluster create`: each checks quietly whether it is done, and acts only if not."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from kubetrain.imagebuild.process import CommandFailed, Echo, command_line, run_captured, run_streamed

DEVICE_PLUGIN_VERSION = "0.20.0"
DEVICE_PLUGIN_REPO = "https://nvidia.github.io/k8s-device-plugin"
DEVICE_PLUGIN_NAMESPACE = "nvidia-device-plugin"
TRAINING_OPERATOR_VERSION = "v1.9.4"
TRAINING_OPERATOR_KUSTOMIZE = (f"github.com/kubeflow/trainer.git/manifests/overlays/standalone"
                               f"?ref={TRAINING_OPERATOR_VERSION}")
# The image that overlay deploys (its `images:` newTag, a commit tag rather than the release's name).
TRAINING_OPERATOR_IMAGE = "ghcr.io/kubeflow/training-v1/training-operator:v1-93c5489"
OPERATOR_NAMESPACE = "kubeflow"
OPERATOR_CERT_SECRET = "training-operator-webhook-cert"  # filled by the operator's own cert-rotator
OPERATOR_POD_SELECTOR = "control-plane=kubeflow-training-operator"
CERT_WAIT_SECONDS = 120
RUNTIME_CLASS = """\
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata:
  name: nvidia
handler: nvidia
"""
INSTALL_TOOLKIT = """\
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y gpg curl
keyring=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg
curl -fsSL https://nvidia.github.io/libnvidia-container/gpgkey | gpg --batch --yes --dearmor -o "$keyring"
curl -fsSL https://nvidia.github.io/libnvidia-container/stable/deb/nvidia-container-toolkit.list \\
  | sed "s#deb https://#deb [signed-by=$keyring] https://#g" \\
  > /etc/apt/sources.list.d/nvidia-container-toolkit.list
apt-get update
apt-get install -y nvidia-container-toolkit
"""
CONTAINERD_HAS_NVIDIA = "containerd config dump | grep -qF 'runtimes.nvidia]'"
CONFIGURE_CONTAINERD = """\
set -euo pipefail
nvidia-ctk runtime configure --runtime=containerd --config-source=command
systemctl restart containerd
"""
# Toolkits before 1.19 leave ModifyDeviceFiles at 1, letting the driver recreate device nodes a worker should
# not see; newer ones mask it themselves (then the check below passes and this never runs).
MASK_PARAMS = """\
set -euo pipefail
umount -R /proc/driver/nvidia || true
cp /proc/driver/nvidia/params /root/gpu-params
sed -i 's/^ModifyDeviceFiles: 1$/ModifyDeviceFiles: 0/' /root/gpu-params
mount --bind /root/gpu-params /proc/driver/nvidia/params
"""


@dataclass(frozen=True)
class Step:
    """A named step: `done` is a quiet check command (exit 0 = nothing to do), `act` runs otherwise."""

    name: str
    done: Callable[[], bool]
    act: Callable[[Echo], None]


def run_steps(steps: list[Step], echo: Echo, rerun_hint: str) -> None:
    for step in steps:
        if step.done():
            echo(f"kubetrain: {step.name}: already done")
            continue
        echo(f"kubetrain: {step.name} ...")
        try:
            step.act(echo)
        except CommandFailed as exc:
            raise CommandFailed(f"step '{step.name}' failed: {exc.headline}", exc.tail, rerun_hint) from None
        echo(f"kubetrain: {step.name}: done")


def succeeds(argv: list[str]) -> Callable[[], bool]:
    return lambda: run_captured(argv).code == 0


def streamed(argv: list[str], stdin: str | None = None) -> Callable[[Echo], None]:
    def act(echo: Echo) -> None:
        code, tail = run_streamed(argv, echo=echo, stdin=stdin)
        if code != 0:
            raise CommandFailed(f"`{short_command(argv)}` exited {code}", tail)

    return act


def short_command(argv: list[str]) -> str:
    """The command line, with a trailing multi-line script left out ('docker exec node bash -c ...')."""
    return command_line(argv[:-1]) + " ..." if "\n" in argv[-1] else command_line(argv)


def node_exec(node: str, script: str) -> list[str]:
    return ["docker", "exec", node, "bash", "-c", script]


def gpu_worker_steps(node: str, hidden: list[int]) -> list[Step]:
    """Inside one GPU worker: toolkit, containerd's nvidia runtime, driver params, and hiding other GPUs."""
    in_node = ["docker", "exec", node]
    steps = [
        Step(f"{node}: install the NVIDIA Container Toolkit",
             succeeds([*in_node, "sh", "-c", "command -v nvidia-ctk"]),
             streamed(node_exec(node, INSTALL_TOOLKIT))),
        Step(f"{node}: configure containerd's nvidia runtime",
             succeeds([*in_node, "sh", "-c", CONTAINERD_HAS_NVIDIA]),
             streamed(node_exec(node, CONFIGURE_CONTAINERD))),
        Step(f"{node}: mask /proc/driver/nvidia/params",
             succeeds([*in_node, "grep", "-qx", "ModifyDeviceFiles: 0", "/proc/driver/nvidia/params"]),
             streamed(node_exec(node, MASK_PARAMS))),
    ]
    if hidden:
        devices = " ".join(f"/dev/nvidia{i}" for i in hidden)
        absent = f"for d in {devices}; do test ! -e $d || exit 1; done"
        remove = f"for d in {devices}; do while umount $d 2>/dev/null; do :; done; rm -f $d; done"
        steps.append(Step(f"{node}: hide GPUs {','.join(map(str, hidden))}",
                          succeeds([*in_node, "sh", "-c", absent]), streamed(node_exec(node, remove))))
    return steps


def runtime_class_step(context: str) -> Step:
    return Step("RuntimeClass nvidia",
                succeeds(["kubectl", "--context", context, "get", "runtimeclass", "nvidia"]),
                streamed(["kubectl", "--context", context, "apply", "-f", "-"], stdin=RUNTIME_CLASS))


def device_plugin_step(context: str) -> Step:
    def done() -> bool:
        result = run_captured(["helm", "--kube-context", context, "list",
                               "--namespace", DEVICE_PLUGIN_NAMESPACE,
                               "--filter", "^nvidia-device-plugin$", "--output", "json"])
        try:
            releases = json.loads(result.stdout) if result.code == 0 else []
        except ValueError:
            releases = []
        chart = f"nvidia-device-plugin-{DEVICE_PLUGIN_VERSION}"
        return any(isinstance(r, dict) and r.get("chart") == chart and r.get("status") == "deployed"
                   for r in releases)

    install = ["helm", "--kube-context", context, "upgrade", "--install", "nvidia-device-plugin",
               "nvidia-device-plugin", "--repo", DEVICE_PLUGIN_REPO, "--version", DEVICE_PLUGIN_VERSION,
               "--namespace", DEVICE_PLUGIN_NAMESPACE, "--create-namespace",
               "--set", "runtimeClassName=nvidia", "--wait", "--timeout", "5m"]
    return Step(f"NVIDIA device plugin v{DEVICE_PLUGIN_VERSION}", done, streamed(install))


def training_operator_step(context: str, manifests: str = TRAINING_OPERATOR_KUSTOMIZE) -> Step:
    """Apply the standalone overlay (`manifests`: its URL, or a local copy for hosts without GitHub)."""
    def done() -> bool:
        result = run_captured(["kubectl", "--context", context, "--namespace", "kubeflow", "get",
                               "deployment", "training-operator",
                               "--output", "jsonpath={.spec.template.spec.containers[0].image}"])
        return result.code == 0 and result.stdout.strip() == TRAINING_OPERATOR_IMAGE

    apply = streamed(["kubectl", "--context", context, "apply", "--server-side", "-k", manifests])

    def act(echo: Echo) -> None:
        apply(echo)
        restart_for_certs(context, echo)

    return Step(f"Kubeflow training-operator {TRAINING_OPERATOR_VERSION}", done, act)


def restart_for_certs(context: str, echo: Echo) -> None:
    """Restart the operator's first pod once its cert-rotator has filled the webhook cert Secret.

    The rotator runs in that pod, so the pod always starts with the Secret still empty, and the kubelet
    refreshes a mounted Secret only on its periodic pod sync (one to two minutes): until then /readyz
    answers "certificates are not ready". A pod started after the Secret is filled mounts the certs at once.
    Should the wait fail (an older kubectl may not take `--for=jsonpath` without a value), the rollout wait
    that follows still decides, as slowly as before."""
    kubectl = ["kubectl", "--context", context, "--namespace", OPERATOR_NAMESPACE]
    filled = run_captured([*kubectl, "wait", f"secret/{OPERATOR_CERT_SECRET}", "--for=jsonpath={.data.ca\\.crt}",
                           f"--timeout={CERT_WAIT_SECONDS}s"])
    if filled.code != 0:
        return
    echo("kubetrain: the training-operator's webhook certificate exists; restarting its pod to mount it")
    streamed([*kubectl, "delete", "pod", "--selector", OPERATOR_POD_SELECTOR, "--wait=false"])(echo)


def operator_rollout(context: str) -> list[str]:
    return ["kubectl", "--context", context, "--namespace", OPERATOR_NAMESPACE, "rollout", "status",
            "deployment/training-operator", "--timeout=300s"]
