"""kubetrain validate against the real API server: many mutated manifests (tests/validate/oracle.py), each
judged offline and by a `dryRun=All` create of the object and of every pod template wrapped in a Pod on the
test control plane (kube-apiserver, training-operator v1.9.4 webhook, Trainer v2.3.0 + JobSet).

    .venv/bin/python benchmarks/bench_validate_oracle.py [--per-kind 1200] [--seed 1] [--show 5]

Prints, per kind and per rule family (the first mutation's), the cases, false greens (valid offline,
rejected by the server: bugs) and false reds (rejected offline, accepted by the server and by pod creation),
as a Markdown table for docs/validate.md; then up to --show shrunk examples of each. Target: 0 false greens.
Needs `make testenv`.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

KINDS = ["Pod", "Deployment", "Job", "ConfigMap", "Secret", "Service", "PersistentVolumeClaim", "PyTorchJob",
         "TrainJob"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-kind", type=int, default=1200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--show", type=int, default=5)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma-separated kinds to generate")
    args = parser.parse_args()

    from kubetrain.validate import SchemaStore
    from kubetrain.validate.schemas import load_crd_source
    from tests.testenv import reference
    from tests.testenv.controlplane import ControlPlane
    from tests.testenv.trainer import TrainerStack
    from tests.validate import oracle

    store = SchemaStore()
    for location in (reference.pytorchjob_crd(), reference.trainer_dir()):
        for crd, source in load_crd_source(str(location)):
            store.add_crd(crd, source)
    rows: list[tuple[str, str, int, int, int]] = []
    examples: list[str] = []
    with ControlPlane() as cp:
        trainer = TrainerStack(cp).start()
        try:
            client = cp.api_client()
            import kubernetes

            kubernetes.client.CoreV1Api(client).create_namespace({"metadata": {"name": "oracle"}})
            time.sleep(2)  # the ServiceAccount controller creates "default"
            began = time.monotonic()
            for kind in args.kinds.split(","):
                outcomes = oracle.run(list(oracle.cases(kind, args.per_kind, args.seed)), client, "oracle", store,
                                      args.workers)
                total, green, red = Counter[str](), Counter[str](), Counter[str]()
                for outcome in outcomes:
                    family = outcome.case.family
                    total[family] += 1
                    green[family] += outcome.false_green
                    red[family] += outcome.false_red
                rows += [(kind, family, total[family], green[family], red[family]) for family in sorted(total)]
                wrong = [o for o in outcomes if o.false_green] + [o for o in outcomes if o.false_red]
                examples += [oracle.shrink(o, client, "oracle", store) for o in wrong[:args.show]]
                print(f"{kind}: {len(outcomes)} cases, {sum(green.values())} false greens, "
                      f"{sum(red.values())} false reds", file=sys.stderr)
            elapsed = time.monotonic() - began
        finally:
            trainer.stop()
    cases = sum(r[2] for r in rows)
    print(f"{cases} cases, seed {args.seed}, {elapsed:.0f} s\n")
    print("| kind | family | cases | false greens | false reds |")
    print("|---|---|---|---|---|")
    for kind, family, count, green_, red_ in rows:
        print(f"| {kind} | {family} | {count} | {green_} ({green_ / count:.1%}) | {red_} ({red_ / count:.1%}) |")
    greens, reds = sum(r[3] for r in rows), sum(r[4] for r in rows)
    print(f"| **all** | | {cases} | {greens} ({greens / cases:.2%}) | {reds} ({reds / cases:.2%}) |")
    print("\nExamples:\n")
    for example in examples:
        print(example)


if __name__ == "__main__":
    main()
