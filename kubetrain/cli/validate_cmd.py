"""kubetrain validate."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from kubetrain.cli.output import emit, handle_errors, info
from kubetrain.errors import SpecError, UsageError
from kubetrain.jobs.exactcheck import ExactChecker
from kubetrain.jobs.localapi import LocalApiServer, crd_installer
from kubetrain.jobs.localwebhooks import LocalWebhooks, remove_webhooks
from kubetrain.jobs.podcheck import cluster_pod_issues
from kubetrain.jobspec.load import read_text
from kubetrain.kube.connection import connect
from kubetrain.kube.crds import training_crds
from kubetrain.validate import Report, SchemaStore, validate_sources
from kubetrain.validate.schemas import (
    DEFAULT_KUBERNETES_VERSION,
    CrdSource,
    cached_crds,
    load_crd_source,
    schema_store,
)

MANIFEST_SUFFIXES = {".yaml", ".yml", ".json"}
FAST_MODE = "offline rules, not the API server's verdict"


@click.command()
@click.argument("paths", nargs=-1, metavar="[PATH|DIR|-]...")
@click.option("-f", "--filename", "filenames", multiple=True, metavar="PATH|DIR|-",
              help="A file, directory or - (stdin) to check, as kubectl's -f (repeatable; same as a PATH argument).")
@click.option("--schema", "schemas", multiple=True, metavar="PATH|URL",
              help="A CRD file, a directory of CRDs, or a URL (repeatable). Takes precedence over the cache.")
@click.option("--from-cluster", is_flag=True,
              help="Read the CRDs from the current cluster first, and dry-run each CRD pod template there as a Pod.")
@click.option("--context", default=None, metavar="NAME", help="kubeconfig context for --from-cluster.")
@click.option("--kubeconfig", default=None, metavar="FILE",
              help="kubeconfig file for --from-cluster (default: $KUBECONFIG, then ~/.kube/config).")
@click.option("--strict", is_flag=True, help="Fail on warnings too.")
@click.option("--ignore-missing-schemas", is_flag=True, help="Warn instead of fail for kinds without a schema.")
@click.option("--kubernetes-version", default=DEFAULT_KUBERNETES_VERSION, show_default=True,
              help="Kubernetes version (1.31 to 1.37) whose core schemas and pod rules apply.")
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--skip-non-kubernetes", is_flag=True,
              help="Pass over YAML without apiVersion and kind (CI workflows, Hydra or conda configs) and files "
                   "without objects, as the pre-commit hook does.")
@click.option("--exact", is_flag=True,
              help="The API server's own verdict: dry-run every object (and the pods and Services the operators "
                   "would create) on a local kube-apiserver of --kubernetes-version, started once and kept warm.")
@click.option("--server-side", is_flag=True, help="With --exact: send objects as `kubectl apply --server-side` does.")
@click.option("--server-binaries", default=None, metavar="DIR",
              help="With --exact: a directory holding etcd and kube-apiserver (else $KUBEBUILDER_ASSETS, "
                   "setup-envtest's store, kubetrain's test environment).")
@click.option("--webhooks/--no-webhooks", default=True, show_default=True,
              help="With --exact: run the operators' own admission webhooks (training-operator, Trainer, JobSet) "
                   "where their binaries are found, each started the first time a file holds a kind it admits; "
                   "--no-webhooks stops those running and uses kubetrain's port of their rules.")
@click.option("--stop-server", is_flag=True, help="Stop the local API servers --exact left running, and exit.")
@handle_errors
def validate(paths: tuple[str, ...], filenames: tuple[str, ...], schemas: tuple[str, ...], from_cluster: bool,
             context: str | None, kubeconfig: str | None, strict: bool, ignore_missing_schemas: bool,
             kubernetes_version: str, output: str, skip_non_kubernetes: bool, exact: bool, server_side: bool,
             server_binaries: str | None, webhooks: bool, stop_server: bool) -> None:
    """Check manifests: offline, or with --exact the API server's own verdict.

    Offline: against the CRD and core schemas and kubetrain's port of Kubernetes' and the operators' rules.
    --exact: every object dry-run on a local kube-apiserver (started once, kept warm).

    Works on any manifests, rendered or hand-written, multi-document, and on kubetrain.yaml job specs (checked
    by the spec loader). Exit 1 if anything is invalid,
    2 for usage and input errors, including input with no documents at all (an empty pipe).

    \b
    Examples:
      kubetrain schemas fetch && kubetrain validate deploy/
      kubetrain render | kubetrain validate -
      kubetrain validate --schema crds/ --strict -o json job.yaml
      kubetrain validate -f kubetrain.yaml -f deploy/
      kubetrain validate --exact deploy/
    """
    if stop_server:
        # the verb's work loads when it runs: `kubetrain --help` and the other verbs stay fast (import budget)
        from kubetrain.jobs.localapi import stop_all

        stopped = stop_all()
        info(f"stopped the local API server of Kubernetes {', '.join(stopped)}" if stopped else
             "no local API server was running")
        return
    if (context or kubeconfig) and not from_cluster:
        raise UsageError("--context and --kubeconfig only apply with --from-cluster")
    if (server_side or server_binaries or not webhooks) and not exact:
        raise UsageError("--server-side, --server-binaries and --no-webhooks only apply with --exact")
    if exact and from_cluster:
        raise UsageError("--exact and --from-cluster are two different verdicts: pick one")
    store = build_store(schemas, from_cluster, context, kubernetes_version, kubeconfig=kubeconfig)
    sources = read_sources((*filenames, *paths) or ("-",))
    if exact:
        report, verdict_by = _exact_report(sources, store, schemas, kubernetes_version, server_side,
                                           server_binaries, skip_non_kubernetes, ignore_missing_schemas, webhooks)
    else:
        report = validate_sources(sources, store, ignore_missing_schemas, skip_non_kubernetes)
        verdict_by = FAST_MODE
    if from_cluster:
        report.issues += _server_pod_issues(sources, context, kubeconfig)
    print_report(report, output, strict, verdict_by)
    if not exact and output == "text" and report.documents:
        info(f"{report.not_checked()}: `kubetrain validate --exact` gives the API server's verdict")
    if report.documents == 0 and not skip_non_kubernetes:
        raise UsageError("no documents to validate; if this reads a pipe, the command before it may have failed "
                         "(use `set -o pipefail`, or validate files)")
    if report.failed(strict):
        sys.exit(1)


def build_store(schemas: tuple[str, ...], from_cluster: bool, context: str | None, kubernetes_version: str,
                kubeconfig: str | None = None) -> SchemaStore:
    """Schemas in precedence order: the cluster's CRDs, --schema, then the cache."""
    return schema_store(_cluster_crds(context, kubeconfig) if from_cluster else None, schemas, kubernetes_version)


def _cluster_crds(context: str | None, kubeconfig: str | None) -> Callable[[], list[CrdSource]]:
    return lambda: training_crds(connect(context, kubeconfig))


def _exact_report(sources: list[tuple[str, str]], store: SchemaStore, schemas: tuple[str, ...], version: str,
                  server_side: bool, binaries: str | None, skip_foreign: bool,
                  ignore_missing: bool, webhooks: bool = True) -> tuple[Report, str]:
    """Every document dry-run on the local kube-apiserver (kubetrain/jobs/exactcheck.py), with the operators'
    webhooks where their binaries are found (kubetrain/jobs/localwebhooks.py)."""
    crds = [crd for location in schemas for crd, _ in load_crd_source(location)]
    crds += [crd for crd, _ in cached_crds()]
    began = time.monotonic()
    server = LocalApiServer(version, binaries)
    with server.using() as rest:
        install = crd_installer(rest, server.dir, [c for c in crds if c.get("kind") == "CustomResourceDefinition"])
        hooks = LocalWebhooks(rest, server.dir, binaries, version, install) if webhooks else None
        if not webhooks:
            remove_webhooks(rest, server.dir)
        checker = ExactChecker(rest, server_side, ignore_missing, install, hooks.admit if hooks else None,
                               hooks.keep if hooks else None)
        report = checker.check_sources(sources, store, skip_foreign)
    assert server.state is not None
    how = f"started in {time.monotonic() - began:.1f} s" if server.started else "warm"
    by = f"the API server's verdict (local kube-apiserver {server.state.version}, {how})"
    if hooks and hooks.running():
        started = "".join(f", {name} started in {seconds:.1f} s" for name, seconds in hooks.started.items())
        by += f" with the webhooks of {', '.join(hooks.running())}{started}"
    return report, by


def _server_pod_issues(sources: list[tuple[str, str]], context: str | None, kubeconfig: str | None) -> list[Any]:
    """Every pod template of a CRD, dry-run created as a Pod on the cluster (kubetrain/jobs/podcheck.py)."""
    return cluster_pod_issues(connect(context, kubeconfig), sources)


def read_sources(paths: tuple[str, ...]) -> list[tuple[str, str]]:
    sources = []
    for path in paths:
        if path != "-" and Path(path).is_dir():
            files = sorted(p for p in Path(path).rglob("*") if p.suffix in MANIFEST_SUFFIXES and p.is_file())
            if not files:
                raise UsageError(f"{path}: no .yaml, .yml or .json files in this directory")
            sources += [_read(str(f)) for f in files]
        else:
            sources.append(_read(path))
    return sources


def _read(path: str) -> tuple[str, str]:
    try:
        return read_text(path)
    except SpecError as exc:
        raise UsageError(str(exc)) from None


def print_report(report: Report, output: str, strict: bool, verdict_by: str = "") -> None:
    if output == "json":
        extra = {"verdictBy": verdict_by, **({"notChecked": report.not_checked()} if verdict_by == FAST_MODE else {})}
        emit(json.dumps({**report.as_dict(strict), **extra}, indent=2) + "\n")
        return
    emit("".join(issue.text() + "\n" for issue in report.issues))
    verdict = "invalid" if report.failed(strict) else "valid"
    info(f"{report.documents} document(s): {len(report.errors())} error(s), "
         f"{len(report.warnings())} warning(s): {verdict} ({verdict_by})")
