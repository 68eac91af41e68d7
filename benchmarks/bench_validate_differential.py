"""The differential test at full size (tests/validate/differential.py): every schema- and YAML-driven case of
Pod, Deployment, ConfigMap, Service, PyTorchJob and TrainJob, judged by the test control plane (the suite's
kube-apiserver with the training-operator's webhook; Trainer + JobSet running for TrainJobs), by `validate --exact`
(with the operators' webhooks beside the local server, as by default) and offline.

    .venv/bin/python benchmarks/bench_validate_differential.py [--kinds Pod,...] [--show 5] [--no-webhooks]

Prints a Markdown table by kind and mutation family (cases, --exact's disagreements, the offline mode's false
reds and false greens) and the offline false-green rate per kind, for docs/validate.md. Targets: --exact
agrees on every case; the offline mode has 0 false reds. Needs `make testenv`.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    from tests.validate.differential import KINDS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--show", type=int, default=5)
    parser.add_argument("--no-webhooks", action="store_true", help="--exact with kubetrain's port of the "
                        "operators' webhook rules instead of their binaries")
    args = parser.parse_args()

    import kubernetes

    from kubetrain.jobs.localapi import LocalApiServer, install_crds, stop_all
    from kubetrain.jobs.localwebhooks import LocalWebhooks
    from kubetrain.rules.k8s.versions import DEFAULT
    from kubetrain.validate import SchemaStore
    from kubetrain.validate.schemas import load_crd_source
    from tests.harness.helpers import rest_for
    from tests.testenv import binaries, reference
    from tests.testenv.controlplane import ControlPlane
    from tests.testenv.trainer import TrainerStack
    from tests.validate.differential import all_cases, crd_schemas, judge

    crds = [crd for location in (reference.pytorchjob_crd(), reference.trainer_dir(), reference.jobset_crd())
            for crd, _ in load_crd_source(str(location))]
    store = SchemaStore()
    for crd in crds:
        store.add_crd(crd, "reference")
    os.environ["KUBETRAIN_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench-differential-")
    bins = str(binaries.resolve(("etcd", "kube-apiserver"))["kube-apiserver"].parent)
    table: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    fields: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    examples: list[str] = []
    began = time.monotonic()
    with ControlPlane() as cp:
        client = cp.api_client()
        kubernetes.client.CoreV1Api(client).create_namespace({"metadata": {"name": "differential"}})
        server = LocalApiServer(DEFAULT, bins)
        stack = TrainerStack(cp).start() if "TrainJob" in args.kinds.split(",") else None
        try:
            with server.using() as local:
                install_crds(local, server.dir, crds)
                webhooks = None if args.no_webhooks else LocalWebhooks(local, server.dir, bins, DEFAULT, None)
                for kind in args.kinds.split(","):
                    results = judge(all_cases(kind, crd_schemas(crds)), rest_for(client), "differential", local,
                                    store, client, webhooks)
                    for v in results:
                        for row in (table[(kind, v.case.family)], fields[(kind, v.case.field)]):
                            row[0] += 1
                            row[1] += v.exact_disagrees
                            row[2] += v.false_red
                            row[3] += v.false_green
                    examples += [v.describe() for v in results if v.exact_disagrees or v.false_red][:args.show]
                    print(f"{kind}: {len(results)} cases", file=sys.stderr)
        finally:
            if stack is not None:
                stack.stop()
            stop_all()
    print(f"{sum(r[0] for r in table.values())} cases, {time.monotonic() - began:.0f} s\n")
    print_tables(table, fields, args.kinds.split(","), examples)


def print_tables(table: dict[tuple[str, str], list[int]], fields: dict[tuple[str, str], list[int]],
                 kinds: list[str], examples: list[str]) -> None:
    print("| kind | family | cases | --exact disagrees | offline false reds | offline false greens |")
    print("|---|---|---|---|---|---|")
    for (kind, family), (count, exact, red, green) in sorted(table.items()):
        print(f"| {kind} | {family} | {count} | {exact} | {red} | {green} ({green / count:.0%}) |")
    print("\n| kind | offline false-green rate |\n|---|---|")
    for kind in kinds:
        rows = [r for (k, _), r in table.items() if k == kind]
        count, green = sum(r[0] for r in rows), sum(r[3] for r in rows)
        print(f"| {kind} | {green}/{count} ({green / max(count, 1):.0%}) |")
    print("\nFields with a disagreement or an offline false green:\n")
    print("| kind | field | cases | --exact disagrees | offline false reds | offline false greens |")
    print("|---|---|---|---|---|---|")
    for (kind, field), (count, exact, red, green) in sorted(fields.items()):
        if exact or red or green:
            print(f"| {kind} | `{field or '(List)'}` | {count} | {exact} | {red} | {green} |")
    print("\nExamples:\n")
    print("\n".join(examples))


if __name__ == "__main__":
    main()
