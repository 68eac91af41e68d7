"""A Sweep run by kubetrain's controller, deployed in the cluster, on the real node (kubelet + containerd).

Six trials of a plain script (one pod each, two at a time) that print the objective, `acc` = 1/WIDTH, at steps
1..10: trial 0 (WIDTH=1, the best) ends in a few seconds, the others take 30 s, so the median rule prunes each at
its first value after trial 0 completed and its TrainingJob, and so its pod, is deleted. The leading controller's
pod is deleted mid-sweep; the other replica takes the Lease and carries on from the Sweep's status: trials 0..5,
each created once. `kubetrain sweep stop` then leaves no pod, Service or ConfigMap of the sweep. The controller
reads progress every 2 s (`--progress-interval`), not the default 30 s, so that pruning comes while trials run.
"""

from __future__ import annotations

from typing import Any

import kubernetes
import pytest

from tests.controller.operator_env import GROUP, VERSION, custom
from tests.harness.helpers import wait_for
from tests.testenv import node as real

from .conftest import PLACEMENT, Cli
from .test_controller_deployed import NAMESPACE, deploy, holder

pytestmark = [pytest.mark.slow, pytest.mark.torch]
SWEEP = "sw"
TRIALS = 6
# torchrun runs anything but `python ...` with --no-python: this is `python3 -c SCRIPT` on every rank.
SCRIPT = """
import json, os, time
width = int(os.environ["WIDTH"])
for step in range(1, 11):
    line = {"kind": "eval", "rank": 0, "step": step, "acc": 1 / width, "time": time.time()}
    print("KUBETRAIN_METRICS " + json.dumps(line), flush=True)
    time.sleep(0.2 if width == 1 else 3)
"""


def sweep_body(namespace: str, image: str) -> dict[str, Any]:
    trial = {"image": image, "command": ["python3", "-c", SCRIPT], "nodes": 1, "placement": PLACEMENT,
             "resources": {"cpu": "250m", "memory": "512Mi"}, "env": {"OMP_NUM_THREADS": "1"}}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Sweep",
            "metadata": {"name": SWEEP, "namespace": namespace},
            "spec": {"parameters": [{"name": "width", "choice": list(range(1, TRIALS + 1)), "env": "WIDTH"}],
                     "objective": {"metric": "acc", "goal": "max"}, "search": {"algorithm": "grid"},
                     "trials": TRIALS, "parallelism": 2,
                     "earlyStopping": {"rule": "median", "minTrials": 1, "warmupSteps": 0}, "trial": trial}}


def sweep_status(k8s: Any, namespace: str) -> dict[str, Any]:
    obj = custom(k8s).get_namespaced_custom_object(GROUP, VERSION, namespace, "sweeps", SWEEP)
    return obj.get("status") or {}  # type: ignore[no-any-return]


def trial_states(k8s: Any, namespace: str) -> list[str]:
    return [t["state"] for t in (sweep_status(k8s, namespace).get("state") or {}).get("trials") or []]


def trial_jobs(k8s: Any, namespace: str) -> list[str]:
    items = custom(k8s).list_namespaced_custom_object(GROUP, VERSION, namespace, "trainingjobs")["items"]
    return sorted(t["metadata"]["name"] for t in items)


def pods_of(core: Any, namespace: str, trials: list[int]) -> list[str]:
    prefixes = tuple(f"{SWEEP}-t{n}-" for n in trials)
    return [p.metadata.name for p in core.list_namespaced_pod(namespace).items if p.metadata.name.startswith(prefixes)]


def created_trials(core: Any, namespace: str) -> list[str]:
    """The TrainingJobs the controllers created, by their TrialCreated Events (an Event's count > 1 is a second
    create of the same name)."""
    events = [e for e in core.list_namespaced_event(namespace).items if e.reason == "TrialCreated"]
    return sorted(e.message.split()[-1] for e in events for _ in range(e.count or 1))


def test_a_sweep_on_the_real_node_prunes_survives_its_controller_and_stops_clean(
        controlplane: Any, real_node: real.RealNode, k8s: Any, cli: Cli, image: str, namespace: str,
        controller_image: str) -> None:
    core = kubernetes.client.CoreV1Api(k8s)
    with deploy(controlplane, real_node, cli, controller_image, args=("--progress-interval=2",)) as pods:
        custom(k8s).create_namespaced_custom_object(GROUP, VERSION, namespace, "sweeps", sweep_body(namespace, image))
        wait_for(lambda: (s := trial_states(k8s, namespace)) and s[0] == "complete" and len(s) >= 3,
                 "trial 0 complete and trial 2 started", 300)
        leader = wait_for(lambda: holder(k8s), "the Lease's holder", 30)
        (killed,) = [p.metadata.name for p in pods if leader.startswith(f"{p.metadata.name}_")]
        core.delete_namespaced_pod(killed, NAMESPACE)
        wait_for(lambda: (h := holder(k8s)) and not h.startswith(f"{killed}_"), "another replica leads", 120)

        done = wait_for(lambda: (s := sweep_status(k8s, namespace)).get("phase") == "Succeeded" and s,
                        "the Sweep Succeeded", 300)
        numbers = [t["number"] for t in done["state"]["trials"]]
        states = [t["state"] for t in done["state"]["trials"]]
        assert numbers == list(range(TRIALS)), numbers  # none lost, none twice
        assert created_trials(core, namespace) == [f"{SWEEP}-t{n}" for n in range(TRIALS)]
        assert states[0] == "complete" and "pruned" in states and set(states) <= {"complete", "pruned"}, states
        counts = {s: states.count(s) for s in ("complete", "pruned")}
        assert done["trials"] == {"total": TRIALS, "running": 0, "failed": 0, "stopped": 0, **counts}, done
        assert done["best"]["trial"] == 0 and done["best"]["value"] == 1.0, done["best"]
        pruned = [n for n, s in enumerate(states) if s == "pruned"]
        # Deleted in the foreground: the garbage collector removes a TrainingJob after its pods, a moment later.
        wait_for(lambda: not pods_of(core, namespace, pruned)
                 and not {f"{SWEEP}-t{n}" for n in pruned} & set(trial_jobs(k8s, namespace)),
                 "the pruned trials' pods and TrainingJobs deleted", 120)

        cli("sweep", "stop", SWEEP, "-n", namespace, "--timeout", "120")
        assert trial_jobs(k8s, namespace) == []
        wait_for(lambda: not core.list_namespaced_pod(namespace).items and not core.list_namespaced_service(
            namespace).items, "no pod or Service left", 120)
        assert [c.metadata.name for c in core.list_namespaced_config_map(namespace).items] == ["kube-root-ca.crt"]
