"""Scenarios d, f, g on the real node: kill -9 inside a worker's container, and what the running pod looks like.

Two copies of the digits job run side by side: a reference and one whose worker gets `kill -9` in its
training process (through real exec) after the first checkpoint. While that job runs, the restricted
securityContext is checked inside its container (g) and `kubetrain gpu` asks it for GPUs (f): cheap checks
folded into a job that runs anyway. The killed job also tracks to the suite's MLflow server and to TensorBoard
(spec.tracking): whatever the kill restarts, it is one MLflow run with every point once; `kubetrain
tensorboard --cluster` serves its event files from a pod beside it (through its own port-forward), deleted
with the job.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import signal
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from kubernetes.stream import stream

from kubetrain.metrics import parse_metrics_line
from tests.testenv.mlflowserver import MLflowServer
from tests.testenv.polling import wait_for

from .conftest import KUBETRAIN, Cli

pytestmark = [pytest.mark.slow, pytest.mark.torch]
# On an idle machine 4 epochs took 17 s: with fewer, the job could finish before the kill (the first checkpoint
# is at step 10) or before the restarted worker's shape is checked.
EPOCHS = 8
# The training process, not torchrun (whose own command line also names kubetrain.runtime) nor a wrapper.
KILL = ("import os, signal\n"
        "for pid in filter(str.isdigit, os.listdir('/proc')):\n"
        "    try: argv = open(f'/proc/{pid}/cmdline', 'rb').read().split(b'\\0')\n"
        "    except OSError: continue\n"
        "    if b'kubetrain.runtime' in argv and not any(b'torchrun' in a for a in argv):\n"
        "        os.kill(int(pid), signal.SIGKILL); print(pid)\n")


def _spec(project: Path, name: str, tracking: dict[str, Any] | None = None) -> Path:
    spec = yaml.safe_load((project / "kubetrain.yaml").read_text())
    if tracking:
        spec["spec"]["tracking"] = tracking
    spec["metadata"]["name"] = name
    spec["spec"]["resources"] = {"cpu": "250m", "memory": "1Gi"}  # two 2-pod jobs on a 2-CPU node
    spec["spec"]["checkpoint"] = {"dir": f"/ckpt/{name}", "everySteps": 10, "keep": 2}
    spec["spec"]["train"]["epochs"] = EPOCHS
    spec["spec"]["security"] = {"readOnlyRootFilesystem": True}  # g: TMPDIR=/tmp on an emptyDir
    # No runPolicy: the default backoffLimit (10) must survive one kill -9. The training-operator sums the
    # restarts of all running pods: the killed worker's, the master's when its collective fails, and a worker
    # instance that met the dying master's store (with the old default, 3: BackoffLimitExceeded, 1 run in 3).
    path = project / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _exec(core: kubernetes.client.CoreV1Api, namespace: str, pod: str, argv: list[str],
          container: str = "pytorch") -> tuple[int, str]:
    """Run argv in the pod's container (the training one by default); (exit code, stdout + stderr)."""
    ws = stream(core.connect_get_namespaced_pod_exec, pod, namespace, command=argv, container=container,
                stderr=True, stdin=False, stdout=True, tty=False, _preload_content=False)
    ws.run_forever(timeout=60)
    output = (ws.read_stdout(timeout=0) or "") + (ws.read_stderr(timeout=0) or "")
    code = ws.returncode
    ws.close()
    return (code if code is not None else -1), output


def _model_hash(checkpoint_dir: Path) -> tuple[str, str]:
    """(newest checkpoint's name, sha256 over its model parameters in name order)."""
    import torch

    newest = sorted(checkpoint_dir.glob("step-*.pt"))[-1]
    model = torch.load(newest, map_location="cpu", weights_only=False)["model"]
    sha = hashlib.sha256()
    for key in sorted(model):
        sha.update(key.encode())
        sha.update(model[key].contiguous().numpy().tobytes())
    return newest.name, sha.hexdigest()


def _kill_the_training_process(core: kubernetes.client.CoreV1Api, namespace: str, worker: str) -> None:
    """kill -9 through exec in the worker's container. Its training process may be between restarts of its
    rendezvous when we look: look again."""
    found: list[str] = []

    def kill() -> bool:
        try:
            code, killed = _exec(core, namespace, worker, ["python3", "-c", KILL])
        except kubernetes.client.exceptions.ApiException as exc:  # the container is restarting right now
            pod = core.read_namespaced_pod(worker, namespace)
            found[:] = [str(exc.reason)[-80:], str(pod.status.phase),
                        str([(c.name, c.state, c.last_state, c.restart_count)
                             for c in pod.status.container_statuses or []])[:3000]]
            return False
        found[:] = [f"exit {code}: {killed!r}"]
        return code == 0 and bool(killed.split())

    try:
        wait_for(kill, f"a training process to kill in {worker}", 60, 1)
    except AssertionError:
        raise AssertionError(f"no training process killed in {worker}: {found}") from None


def _starts(text: str) -> list[dict[str, Any]]:
    records = (parse_metrics_line(line.split("] ", 1)[-1]) for line in text.splitlines())
    return [r for r in records if r is not None and r.get("kind") == "start"]


def _instances(core: kubernetes.client.CoreV1Api, namespace: str, pod: str) -> tuple[list[str] | None, list[str]]:
    """The lines the kubelet kept: (the previous instance's, or None when it has none or no longer has them;
    the current one's). The kubelet keeps one dead container per pod and container: once the pod has ended,
    that is the last instance, and `previous` answers "unable to retrieve container logs for ..." instead."""
    status = core.read_namespaced_pod(pod, namespace).status.container_statuses[0]
    current = core.read_namespaced_pod_log(pod, namespace, container="pytorch").splitlines()
    if not status.restart_count:
        return None, current
    previous = core.read_namespaced_pod_log(pod, namespace, container="pytorch", previous=True)
    return (None if previous.startswith("unable to retrieve container logs") else previous.splitlines()), current


def test_kill9_in_a_worker_resumes_to_identical_parameters(cli: Cli, image: str, project: Path, namespace: str,
                                                           claim: Path, real_node: Any,
                                                           mlflow_server: MLflowServer) -> None:
    """d (+ f, g): kill -9 of the worker's training process; restart, resume, same final parameters; one
    MLflow run."""
    core = kubernetes.client.CoreV1Api(real_node.cp.api_client())
    experiment = f"{namespace}-digits-kill"
    tracking = {"mlflow": {"trackingUri": mlflow_server.uri_at(real_node.gateway), "experiment": experiment},
                "tensorboard": {"logDir": "/ckpt/digits-kill-tb"}}
    cli("submit", "-f", str(_spec(project, "digits-ref")), "-n", namespace, "--image", image)
    cli("submit", "-f", str(_spec(project, "digits-kill", tracking)), "-n", namespace, "--image", image)
    follow = subprocess.Popen([*KUBETRAIN, "logs", "digits-kill", "-n", namespace, "-f", "--raw"], env=cli.env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    board: subprocess.Popen[str] | None = None
    try:
        worker = "digits-kill-worker-0"
        wait_for(lambda: any((claim / "digits-kill").glob("step-*.pt")), "the first checkpoint of digits-kill", 600, 1)
        _kill_the_training_process(core, namespace, worker)

        def restarted_and_running() -> bool:
            statuses = core.read_namespaced_pod(worker, namespace).status.container_statuses or []
            return any(c.restart_count >= 1 and c.state.running for c in statuses)

        wait_for(restarted_and_running, f"{worker} to run again after the kill", 180, 1)
        _check_pod_shape(cli, core, namespace, worker)  # f, g: on the restarted worker, still training
        board = subprocess.Popen([*KUBETRAIN, "tensorboard", "digits-kill", "--cluster", "-n", namespace,
                                  "--timeout", "300"], env=cli.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True)
        assert board.stdout is not None
        url = board.stdout.readline().strip()  # once the pod runs; "" if the command ended
        stdout, stderr = _follow_to_the_end(follow, core, namespace)
    except BaseException:
        if board is not None:
            board.kill()
        raise
    finally:
        follow.kill()
    try:
        assert follow.returncode == 0, stderr[-2000:]
        for name in ("digits-ref", "digits-kill"):
            wait_for(lambda n=name: f"{namespace}/{n}: Succeeded" in cli("status", n, "-n", namespace).stdout,
                     f"{name} Succeeded", 900, 1)

        restarts = core.read_namespaced_pod(worker, namespace).status.container_statuses[0].restart_count
        assert restarts >= 1, "the kubelet did not restart the killed worker's container"
        resumed = [s for s in _starts(stdout) if s.get("resumed_from")]
        assert resumed and int(str(resumed[-1]["start_step"])) > 0, _starts(stdout)
        assert _model_hash(claim / "digits-kill") == _model_hash(claim / "digits-ref")

        _check_follow_log(core, namespace, stdout, stderr)
        _check_one_run(cli, mlflow_server, tracking["mlflow"], namespace, stdout)
        _check_tensorboard_pod(cli, core, namespace, board, url)
    finally:
        board.kill()  # when a check above failed; nothing once it stopped


# The job ends about a minute after the restarted worker runs on an idle machine. Well within the test's own
# timeout: a job that never ends fails here with what its pods were doing, not with pytest's bare timeout.
FOLLOW_SECONDS = 480


def _follow_to_the_end(follow: subprocess.Popen[str], core: kubernetes.client.CoreV1Api,
                       namespace: str) -> tuple[str, str]:
    """`kubetrain logs -f`'s output once the job ended; if it did not within FOLLOW_SECONDS, an AssertionError
    with each pod's state and last log lines, and the follower's last lines."""
    try:
        return follow.communicate(timeout=FOLLOW_SECONDS)
    except subprocess.TimeoutExpired:
        follow.kill()
        stdout, stderr = follow.communicate()
    lines = [f"`kubetrain logs -f` still following after {FOLLOW_SECONDS} s; its last lines:",
             *stdout.splitlines()[-15:], *stderr.splitlines()[-5:]]
    for pod in core.list_namespaced_pod(namespace).items:
        name = pod.metadata.name
        states = [(c.name, c.restart_count, c.state.to_dict(), c.last_state.to_dict())
                  for c in pod.status.container_statuses or []]
        lines.append(f"pod {name}: {pod.status.phase} {str(states)[:1500]}")
        with contextlib.suppress(kubernetes.client.exceptions.ApiException):
            log = core.read_namespaced_pod_log(name, namespace, container=pod.spec.containers[0].name, tail_lines=20)
            lines += [f"  {line}" for line in log.splitlines()]
    raise AssertionError("\n".join(lines))


def _check_tensorboard_pod(cli: Cli, core: kubernetes.client.CoreV1Api, namespace: str,
                           board: subprocess.Popen[str], url: str) -> None:
    """`kubetrain tensorboard --cluster` serves the job's scalars through its port-forward until Ctrl-C, and the
    garbage collector deletes the TensorBoard pod with the job."""
    try:
        assert url.startswith("http://127.0.0.1:"), (url, board.poll())

        def scalars(path: str) -> Any:
            with urllib.request.urlopen(f"{url}data/plugin/scalars/{path}", timeout=30) as answer:
                return json.loads(answer.read())

        # TensorBoard may still be starting (a refused port) or loading the event files (no tags yet).
        found = wait_for(lambda: scalars("tags").get("."), "TensorBoard's scalars through the port-forward", 120,
                         2, tolerate=(OSError, ValueError))
        assert {"loss", "eval_accuracy"} <= set(found), found
        # TensorBoard loads the event files (one per start of the logging rank) in a thread of its own: the tags
        # are served from the first file while the next is still being read.
        seen: list[Any] = []

        def every_epoch() -> bool:
            seen[:] = scalars("scalars?run=.&tag=eval_accuracy")  # [wall time, step, value], one per epoch
            return len(seen) >= EPOCHS

        with contextlib.suppress(AssertionError):  # asserted below with what was served
            wait_for(every_epoch, "an accuracy point per epoch in TensorBoard", 60, 2, tolerate=(OSError, ValueError))
        assert len(seen) == EPOCHS, seen
    finally:
        board.send_signal(signal.SIGINT)
        _, messages = board.communicate(timeout=60)
    assert board.returncode == 0, messages
    assert "port-forward stopped" in messages, messages
    pod = "digits-kill-tensorboard"
    cli("delete", "digits-kill", "-n", namespace, "--wait", "--timeout", "120")

    def gone() -> bool:
        try:
            core.read_namespaced_pod(pod, namespace)
        except kubernetes.client.exceptions.ApiException as exc:
            return exc.status == 404
        return False

    wait_for(gone, f"{pod} deleted with its job", 120, 1)


def _check_one_run(cli: Cli, server: MLflowServer, tracked: dict[str, str], namespace: str, stdout: str) -> None:
    """Every restart joined the job's MLflow run: one FINISHED run, each point once, its page in `status`."""
    client = server.client()
    runs = client.search_runs([client.get_experiment_by_name(tracked["experiment"]).experiment_id])
    assert len(runs) == 1, [(r.info.run_id, r.info.status) for r in runs]
    run = runs[0]
    # what the trackers said on stderr (in the pods' logs), and the last requests the server had
    said = [line for line in stdout.splitlines() if "tracking:" in line]
    assert run.info.status == "FINISHED" and run.info.run_name == "digits-kill", \
        (run.info.status, said[-5:], [line for line in server.log().splitlines() if " - \"" in line][-5:])
    records = [r for r in map(parse_metrics_line, stdout.splitlines()) if r is not None]
    for kind, key in (("train", "loss"), ("eval", "eval_accuracy")):
        steps = sorted({int(r["step"]) for r in records if r["kind"] == kind and r.get(key) is not None})
        assert sorted(m.step for m in client.get_metric_history(run.info.run_id, key)) == steps, key
    assert len(client.get_metric_history(run.info.run_id, "eval_accuracy")) == EPOCHS  # one per epoch
    cluster = yaml.safe_load(Path(cli.kubeconfig).read_text())["contexts"][0]["context"]["cluster"]
    assert run.data.tags["kubetrain.cluster"] == cluster and run.data.tags["kubetrain.namespace"] == namespace
    status = cli("status", "digits-kill", "-n", namespace).stdout
    page = f"{tracked['trackingUri']}/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}"
    assert f"Run (mlflow): {page}" in status.splitlines(), status


def _check_pod_shape(cli: Cli, core: kubernetes.client.CoreV1Api, namespace: str, pod: str) -> None:
    """g: the real kubelet enforces the restricted securityContext; f: `kubetrain gpu` on a CPU pod."""
    assert _exec(core, namespace, pod, ["id", "-u"]) == (0, "1000\n")
    code, out = _exec(core, namespace, pod, ["sh", "-c", "echo x > /probe"])
    assert code != 0 and "Read-only file system" in out, out
    code, out = _exec(core, namespace, pod, ["sh", "-c", 'echo x > "$TMPDIR/probe" && echo "$TMPDIR"'])
    assert (code, out) == (0, "/tmp\n"), out
    gpu = cli("gpu", "digits-kill", "-n", namespace, "--replica", "worker-0", check=False)
    assert gpu.returncode == 0, gpu.stderr
    # The table keeps its shape for a CPU pod; why it has no GPU goes to stderr.
    assert gpu.stdout.splitlines()[-1].split() == ["worker-0", "-", "-", "-", "-", "-", "-"], gpu.stdout
    assert "worker-0: no GPU: the pod requests no nvidia.com/gpu" in gpu.stderr, gpu.stderr


def _check_follow_log(core: kubernetes.client.CoreV1Api, namespace: str, stdout: str, stderr: str) -> None:
    """`logs -f` across the restarts: said so on stderr, and per pod the lines the kubelet kept."""
    assert "restart" in stderr.lower(), stderr[-2000:]
    # Every metrics line carries its time: none may appear twice.
    metrics = [line for line in stdout.splitlines() if "KUBETRAIN_METRICS" in line]
    assert len(metrics) == len(set(metrics)), "logs -f repeated lines"
    for pod, label in (("digits-kill-worker-0", "worker-0"), ("digits-kill-master-0", "master-0")):
        shown = [line.split("] ", 1)[1] for line in stdout.splitlines() if line.startswith(f"[{label}] ")]
        previous, current = _instances(core, namespace, pod)
        kept = (previous or []) + current
        assert shown[len(shown) - len(kept):] == kept, (pod, len(shown), len(previous or []), len(current))
        if previous is not None or not core.read_namespaced_pod(pod, namespace).status.container_statuses[0] \
                .restart_count:
            assert len(shown) == len(kept), (pod, len(shown), len(kept))  # nothing lost, nothing repeated
