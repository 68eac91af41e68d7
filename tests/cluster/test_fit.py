"""The fit computation: pure, over node and pod dicts shaped like the API's JSON."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kubetrain.cluster.fit import FitRequest, exclusion, fit, holders, pod_request, tolerates

GPU = "nvidia.com/gpu"
H100 = {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}
TAINT = {"key": GPU, "value": "present", "effect": "NoSchedule"}
TOLERATE = {"key": GPU, "operator": "Exists", "effect": "NoSchedule"}


def node(name: str, gpus: int = 8, labels: dict[str, str] | None = None, taints: list[dict[str, Any]] | None = None,
         ready: bool = True, cordoned: bool = False) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels if labels is not None else dict(H100)},
            "spec": {"taints": taints or [], **({"unschedulable": True} if cordoned else {})},
            "status": {"allocatable": {"cpu": "32", **({GPU: str(gpus)} if gpus else {})},
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def pod(node_name: str, gpus: int, phase: str = "Running", init: int = 0) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeName": node_name,
                            "containers": [{"name": "c", "resources": {"limits": {GPU: str(gpus)}}}]}
    if init:
        spec["initContainers"] = [{"name": "i", "resources": {"requests": {GPU: str(init)}}}]
    return {"metadata": {"name": f"p-{node_name}"}, "spec": spec, "status": {"phase": phase}}


def gke_cluster() -> list[dict[str, Any]]:
    """The test harness's shape: 3 H100 nodes (the last tainted) and a CPU node."""
    return [node("gpu-node-0"), node("gpu-node-1"), node("gpu-node-2", taints=[TAINT]),
            node("cpu-node-0", gpus=0, labels={})]


def test_the_issue_example_four_by_eight_on_two_eligible_nodes() -> None:
    result = fit(gke_cluster(), [], FitRequest(4, 8, dict(H100), []))
    assert not result.fits and result.never  # two eligible 8-GPU nodes can never hold 4 such pods
    assert result.message == ("can never fit: 4 pods × 8 nvidia.com/gpu, but the eligible nodes hold at most 2 "
                              "such pod(s) even when idle (cloud.google.com/gke-accelerator=nvidia-h100-80gb)")
    assert "gpu-node-2: taint nvidia.com/gpu=present:NoSchedule not tolerated" in result.hint
    assert "lower spec.nodes to at most 2" in result.hint and "wait" not in result.hint
    assert "cpu-node-0" not in result.hint  # CPU nodes are not worth mentioning


def test_toleration_makes_the_tainted_node_eligible() -> None:
    assert fit(gke_cluster(), [], FitRequest(3, 8, dict(H100), [TOLERATE])).fits
    assert not fit(gke_cluster(), [], FitRequest(4, 8, dict(H100), [TOLERATE])).fits


def test_running_pods_use_gpus_finished_ones_do_not() -> None:
    pods = [pod("gpu-node-0", 8), pod("gpu-node-1", 4), pod("gpu-node-1", 4, phase="Succeeded")]
    result = fit(gke_cluster(), pods, FitRequest(2, 4, {}, []))
    assert not result.fits and result.room == 1
    assert "gpu-node-0: 0/8 free" in result.hint and "gpu-node-1: 4/8 free" not in result.hint
    assert fit(gke_cluster(), pods, FitRequest(1, 4, {}, [])).fits


def test_multiple_pods_per_node_message() -> None:
    result = fit([node("a"), node("b")], [pod("a", 6)], FitRequest(5, 2, {}, []))
    assert result.room == 1 + 4 and result.fits
    result = fit([node("a"), node("b")], [pod("a", 6)], FitRequest(6, 2, {}, []))
    assert result.message == ("needs 6 pods × 2 nvidia.com/gpu; eligible nodes have room for only 5 "
                              "(2 node(s) with ≥ 2 free)")


def test_cordoned_notready_and_selector_are_excluded() -> None:
    nodes = [node("c", cordoned=True), node("n", ready=False), node("s", labels={"other": "x"})]
    result = fit(nodes, [], FitRequest(1, 8, dict(H100), []))
    assert not result.fits and result.never
    assert result.message.startswith("can never fit: each pod needs 8 nvidia.com/gpu but the largest eligible "
                                     "node has 0")
    assert "c: cordoned" in result.hint and "n: NotReady" in result.hint
    assert "s: nodeSelector cloud.google.com/gke-accelerator=nvidia-h100-80gb does not match" in result.hint


def test_larger_than_any_node_is_never_not_wait() -> None:
    """The issue's case: 4 × 16 GPUs on 8-GPU nodes was told to wait for GPUs to free up."""
    result = fit([node(f"g{i}") for i in range(8)], [], FitRequest(4, 16, {}, []))
    assert result.never and not result.not_now
    assert "each pod needs 16 nvidia.com/gpu but the largest eligible node has 8" in result.message
    assert "lower spec.gpusPerNode to at most 8" in result.hint and "free up" not in result.hint


def test_busy_cluster_is_not_now_and_names_who_holds_the_gpus() -> None:
    busy = [pod("gpu-node-0", 8), pod("gpu-node-1", 4)]
    busy[0]["metadata"] = {"name": "bert-master-0", "namespace": "ml",
                           "labels": {"training.kubeflow.org/job-name": "bert"}}
    result = fit(gke_cluster(), busy, FitRequest(2, 8, {}, []))
    assert not result.fits and result.not_now and not result.never
    assert "wait (Pending) until GPUs free up" in result.hint
    held = holders(busy, result.nodes)
    assert held == "gpu-node-0: ml/bert (1 pod(s), 8 GPU); gpu-node-1: ?/p-gpu-node-1 (1 pod(s), 4 GPU)"


def test_no_gpu_capacity_anywhere_points_at_the_device_plugin() -> None:
    result = fit([node("cpu", gpus=0, labels={}), node("gpu-without-plugin", gpus=0)], [], FitRequest(1, 1))
    assert not result.fits and result.no_capacity
    assert "no node advertises allocatable nvidia.com/gpu" in result.message
    assert "device plugin" in result.hint


def test_cpu_job_always_fits() -> None:
    assert fit([node("cpu", gpus=0)], [], FitRequest(3, 0)).fits


def test_effective_request_counts_init_containers_and_defaults_to_limits() -> None:
    assert pod_request(pod("a", 2, init=4)) == 4
    assert pod_request(pod("a", 3, init=1)) == 3
    both = {"spec": {"containers": [{"resources": {"requests": {GPU: "1"}, "limits": {GPU: "2"}}}]}}
    assert pod_request(both) == 1


def test_toleration_semantics() -> None:
    assert tolerates([{"operator": "Exists"}], TAINT)  # tolerates everything
    assert tolerates([{"key": GPU, "value": "present"}], TAINT)  # Equal by default
    assert not tolerates([{"key": GPU, "value": "absent"}], TAINT)
    assert not tolerates([{"key": GPU, "operator": "Exists", "effect": "NoExecute"}], TAINT)
    assert not tolerates([{"key": "other", "operator": "Exists"}], TAINT)
    prefer = {"key": "x", "effect": "PreferNoSchedule"}
    assert exclusion(node("p", taints=[prefer]), FitRequest(1, 1)) is None  # a preference never blocks


# --- properties ------------------------------------------------------------------------------------------

nodes_strategy = st.lists(st.tuples(st.integers(0, 8), st.integers(0, 8), st.booleans(), st.booleans()),
                          min_size=0, max_size=6)


def build(spec: list[tuple[int, int, bool, bool]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    nodes, pods = [], []
    for i, (alloc, used, tainted, ready) in enumerate(spec):
        nodes.append(node(f"n{i}", alloc, taints=[TAINT] if tainted else [], ready=ready))
        if used:
            pods.append(pod(f"n{i}", min(used, alloc) if alloc else used))
    return nodes, pods


def simulate(nodes: list[dict[str, Any]], pods: list[dict[str, Any]], request: FitRequest) -> bool:
    """Place pods one by one, like a scheduler would, on any eligible node with room."""
    free = {}
    for n in nodes:
        if exclusion(n, request) is None:
            free[n["metadata"]["name"]] = int(n["status"]["allocatable"].get(GPU, 0))
    for p in pods:
        if p["spec"]["nodeName"] in free and p["status"]["phase"] not in ("Succeeded", "Failed"):
            free[p["spec"]["nodeName"]] -= pod_request(p)
    for _ in range(request.pods):
        spot = next((name for name, f in free.items() if f >= request.gpus_per_pod), None)
        if spot is None:
            return False
        free[spot] -= request.gpus_per_pod
    return True


@settings(max_examples=300, deadline=None)
@given(nodes_strategy, st.integers(1, 8), st.integers(1, 8), st.booleans())
def test_fit_agrees_with_a_placement_simulation(spec: list[tuple[int, int, bool, bool]], pods_wanted: int,
                                                gpus: int, tolerate: bool) -> None:
    nodes, pods = build(spec)
    request = FitRequest(pods_wanted, gpus, dict(H100), [TOLERATE] if tolerate else [])
    result = fit(nodes, pods, request)
    assert result.fits == simulate(nodes, pods, request)
    assert result.fits == (result.room >= pods_wanted) or result.no_capacity


@settings(max_examples=200, deadline=None)
@given(nodes_strategy, st.integers(1, 8), st.integers(1, 8))
def test_more_pods_or_a_tainted_node_never_helps(spec: list[tuple[int, int, bool, bool]], pods_wanted: int,
                                                 gpus: int) -> None:
    nodes, pods = build(spec)
    request = FitRequest(pods_wanted, gpus, dict(H100), [])
    base = fit(nodes, pods, request)
    bigger = fit(nodes, pods, FitRequest(pods_wanted + 1, gpus, dict(H100), []))
    assert not (bigger.fits and not base.fits)
    tainted = [{**n, "spec": {"taints": [TAINT]}} for n in nodes]
    assert fit(tainted, pods, request).room <= base.room
