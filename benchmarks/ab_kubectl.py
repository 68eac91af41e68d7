"""kubetrain's cluster commands against kubectl on one test control plane: CPU time (user + sys of the child,
from getrusage(RUSAGE_CHILDREN)) and wall time of fresh processes, interleaved round after round so both see the
same load; medians. Each pair runs with the admin's client-certificate kubeconfig and with an exec-plugin
kubeconfig (a Python script returning that certificate, client.authentication.k8s.io/v1; both tools run it).

    kubetrain status bench          vs  kubectl describe pytorchjob bench
    kubetrain list                  vs  kubectl get pytorchjobs
    kubetrain logs bench --tail 5   vs  kubectl logs -l <the job's pod selector> --tail 5 --prefix

The job is bench_status.py's (PyTorchJob `bench`, 2 Running pods on kwok nodes, serving log lines). The kubectl
is the testenv's pinned one (the control plane's version), unless --kubectl names another. The target is a ratio
of at most 1.5 in CPU for every row. With --base BASE (another tree, docs/performance.md) that tree's kubetrain
runs in the same rounds, so a change is measured against kubectl and against its base together. Each round also
times the floor: `python -c pass`, and an interpreter importing only click, yaml, ssl, http.client and json.

    .venv/bin/python benchmarks/ab_kubectl.py [--runs 10] [--kubectl PATH] [--base BASE]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
TARGET = 1.5
# The floor: an interpreter, and one that imports only the libraries these commands stand on (the CLI parser,
# the kubeconfig's YAML, TLS and HTTP/1.1), in the same rounds.
FLOORS = {"python -c pass": "pass",
          "python + click, yaml, ssl, http.client, json": "import click, yaml, ssl, http.client, json"}
Samples = dict[tuple[str, str, str], list[tuple[float, float]]]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--kubectl", default=None, help="default: the testenv's pinned kubectl")
    parser.add_argument("--base", default=None, help="another tree whose kubetrain runs in the same rounds")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from benchmarks.ab_exec import exec_kubeconfig
    from benchmarks.bench_cli import ensure_bytecode, load_average
    from benchmarks.bench_status import bench_job
    from kubetrain.jobs.targets import PYTORCHJOB
    from tests.testenv.controlplane import ControlPlane
    from tests.testenv.kindenv import kind_dir

    kubectl = args.kubectl or str(kind_dir() / "bin" / "kubectl")
    trees = {"kubetrain": str(REPO), **({"base": args.base} if args.base else {})}
    for tree in trees.values():
        ensure_bytecode(Path(tree))  # as an installed package has them
    pairs = {"status": (["status", "bench"], ["describe", "pytorchjob", "bench"]),
             "list": (["list"], ["get", "pytorchjobs"]),
             "logs --tail 5": (["logs", "bench", "--tail", "5"],
                               ["logs", "-l", PYTORCHJOB.pod_selector("bench"), "--tail", "5", "--prefix"])}
    with ControlPlane() as cp, tempfile.TemporaryDirectory() as tmp:
        bench_job(cp, Path(tmp))
        configs = {"cert": cp.kubeconfig, "exec": exec_kubeconfig(cp.kubeconfig, Path(tmp))}
        before = load_average()
        samples = measure(args.runs, pairs, configs, trees, kubectl)
    print(f"medians of {args.runs}, interleaved; {before} before, {load_average()} after; kubectl: {kubectl}")
    report(samples, pairs, configs, bool(args.base))


def measure(runs: int, pairs: dict[str, tuple[list[str], list[str]]], configs: dict[str, Path],
            trees: dict[str, str], kubectl: str) -> Samples:
    """Every command of every tree and kubectl's, then the floors, round after round (the first untimed)."""
    from benchmarks.ab_cli import once

    kubetrain = str(Path(sys.executable).parent / "kubetrain")
    samples: Samples = {}
    for run in range(1 + runs):  # the first round warms the page cache, untimed
        for name, (ours, theirs) in pairs.items():
            for kind, config in configs.items():
                kc = ["--kubeconfig", str(config)]
                tools = [(tool, tree, [kubetrain, *ours, *kc]) for tool, tree in trees.items()]
                for tool, tree, argv in [*tools, ("kubectl", str(REPO), [kubectl, *theirs, *kc])]:
                    sample = once(tree, argv)
                    if run:
                        samples.setdefault((name, kind, tool), []).append(sample)
        for floor, code in FLOORS.items():
            sample = once(str(REPO), [sys.executable, "-c", code])
            if run:
                samples.setdefault((floor, "", ""), []).append(sample)
    return samples


def report(samples: Samples, pairs: dict[str, Any], configs: dict[str, Path], with_base: bool) -> None:
    def cpu(key: tuple[str, str, str]) -> float:
        return statistics.median(s[1] for s in samples[key])

    def wall(key: tuple[str, str, str]) -> float:
        return statistics.median(s[0] for s in samples[key])

    base_head = ("| base CPU | base ratio " if with_base else "", "|---|---" if with_base else "")
    print(f"| command | kubeconfig | kubetrain CPU | kubectl CPU | CPU ratio {base_head[0]}| kubetrain wall "
          f"| kubectl wall |\n|---|---|---|---|---{base_head[1]}|---|---|")
    for name in pairs:
        for kind in configs:
            ours, theirs = cpu((name, kind, "kubetrain")), cpu((name, kind, "kubectl"))
            mark = "" if ours / theirs <= TARGET else f" (over {TARGET})"
            base = ""
            if with_base:
                base = f"| {cpu((name, kind, 'base')):.0f} ms | {cpu((name, kind, 'base')) / theirs:.2f}× "
            print(f"| {name} | {kind} | {ours:.0f} ms | {theirs:.0f} ms | {ours / theirs:.2f}×{mark} {base}"
                  f"| {wall((name, kind, 'kubetrain')):.0f} ms | {wall((name, kind, 'kubectl')):.0f} ms |")
    for floor in FLOORS:
        print(f"floor: {floor}: {cpu((floor, '', '')):.0f} ms CPU = "
              f"{cpu((floor, '', '')) / cpu(('list', 'cert', 'kubectl')):.2f}× kubectl get (cert)")


if __name__ == "__main__":
    main()
