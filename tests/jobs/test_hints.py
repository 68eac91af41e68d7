"""Events and pod statuses → one-line hints (pure)."""

from __future__ import annotations

from kubetrain.jobs.hints import event_hints, last_termination, pod_hints

SCHEDULER = ("0/4 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) had "
             "untolerated taint {nvidia.com/gpu: present}, 2 Insufficient nvidia.com/gpu. preemption: 0/4 nodes "
             "are available: 2 No preemption victims found for incoming pod, 2 Preemption is not helpful for "
             "scheduling.")


def test_failed_scheduling_explains_every_cause() -> None:
    hints = event_hints({"reason": "FailedScheduling", "type": "Warning", "message": SCHEDULER})
    assert len(hints) == 3
    # "2 Insufficient" counts nodes without enough free GPUs, not nodes the job is short of.
    assert hints[0].startswith("not enough free nvidia.com/gpu on 2 node(s):")
    assert hints[1].startswith("1 node(s) have taint {nvidia.com/gpu: present} the pod does not tolerate")
    assert "spec.placement" in hints[2] and "nodeSelector" in hints[2]


def test_cordoned_and_not_ready_nodes() -> None:
    message = ("0/2 nodes are available: 1 node(s) were unschedulable, 1 node(s) had untolerated taint "
               "{node.kubernetes.io/not-ready: }.")
    hints = event_hints({"reason": "FailedScheduling", "message": message})
    assert hints == ["1 node(s) are not ready (node.kubernetes.io/not-ready: ): check them with kubectl get nodes",
                     "1 node(s) are cordoned (unschedulable)"]


def test_image_pull_events() -> None:
    for event in ({"reason": "Failed", "message": 'Failed to pull image "x:1": not found'},
                  {"reason": "Failed", "message": "Error: ErrImagePull"},
                  {"reason": "BackOff", "message": 'Back-off pulling image "x:1"'}):
        (hint,) = event_hints(event)
        assert hint.startswith("cannot pull the image") and "imagePullSecrets" in hint


def test_crash_loop_oom_evicted_and_unknown_events() -> None:
    assert "CrashLoopBackOff" in event_hints({"reason": "BackOff",
                                              "message": "Back-off restarting failed container pytorch"})[0]
    assert "OOMKilled" in event_hints({"reason": "OOMKilling", "message": "Memory cgroup out of memory"})[0]
    assert event_hints({"reason": "Evicted", "message": "The node was low on resource: memory."})[0].startswith(
        "pod evicted: The node was low on resource: memory.")
    assert event_hints({"reason": "Scheduled", "message": "Successfully assigned"}) == []


def test_pod_status_hints() -> None:
    pod = {"status": {"phase": "Running", "containerStatuses": [
        {"name": "pytorch", "restartCount": 3,
         "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
         "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137}}}]}}
    hints = pod_hints(pod)
    assert any("CrashLoopBackOff" in h for h in hints) and any("OOMKilled" in h for h in hints)
    assert last_termination(pod) == "OOMKilled (exit 137)"
    image = {"status": {"containerStatuses": [{"state": {"waiting": {"reason": "ImagePullBackOff",
                                                                       "message": "Back-off pulling image"}}}]}}
    assert pod_hints(image)[0].startswith("cannot pull the image")
    evicted = {"status": {"phase": "Failed", "reason": "Evicted", "message": "ephemeral storage"}}
    assert pod_hints(evicted) == ["pod evicted: ephemeral storage"]
    pending = {"status": {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": SCHEDULER}]}}
    assert len(pod_hints(pending)) == 3
    assert pod_hints({"status": {"phase": "Running"}}) == [] and last_termination({}) == ""
