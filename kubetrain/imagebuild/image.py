"""`build_image`: stage, tag by content hash, build unless that tag exists, push and/or load into kind."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from kubetrain.imagebuild.builders import Builder, detect
from kubetrain.imagebuild.containerd import Node, load_into_node
from kubetrain.imagebuild.containerd import load as containerd_load
from kubetrain.imagebuild.context import STATE_DIR
from kubetrain.imagebuild.kindnodes import kind_nodes, node_engine
from kubetrain.imagebuild.plan import Assembled, BuildPlan, assemble, plan_build, select_context
from kubetrain.imagebuild.process import (
    CommandFailed,
    Echo,
    StepTracker,
    ToolMissing,
    check_piped,
    check_streamed,
    command_line,
    echo_stderr,
    run_captured,
    run_streamed,
)
from kubetrain.imagebuild.selection import Selection
from kubetrain.jobspec.load import LoadedSpec

KIND_HINT = "install kind (https://kind.sigs.k8s.io) or drop --kind"
CTR_HINT = "install containerd's ctr (apt: containerd) or drop --containerd"


@dataclass(frozen=True)
class BuildResult:
    """What `build_image` did: the reference, and whether it built, pushed or kind-loaded it."""

    ref: str
    built: bool
    pushed: bool
    kind_loaded: bool
    containerd_loaded: bool = False


def build_image(loaded: LoadedSpec, *, push: bool = False, kind_cluster: str | None = None,
                builder: str | None = None, echo: Echo = echo_stderr, containerd: str | None = None) -> str:
    """Build the spec's image and return its reference (`repository:kt-<content hash>`).

    Skips the build when that tag already exists (locally, or in the registry with `push`), pushes with
    `push`, loads it into the kind cluster `kind_cluster` and into the containerd listening on the socket
    `containerd` (namespace k8s.io, where a kubelet finds it). Progress and builder output go to `echo`.
    """
    return build(loaded, push=push, kind_cluster=kind_cluster, builder=builder, echo=echo,
                 containerd=containerd).ref


def build_context(loaded: LoadedSpec) -> Selection:
    """What of the spec's build context `kubetrain build` would send (`build --dry-run`): no builder needed."""
    return select_context(plan_build(loaded))


def build(loaded: LoadedSpec, *, push: bool = False, kind_cluster: str | None = None,
          builder: str | None = None, echo: Echo = echo_stderr, containerd: str | None = None) -> BuildResult:
    plan = plan_build(loaded)
    selection = select_context(plan)  # a secret-looking file is refused before any builder is asked
    engine = detect(builder)
    if kind_cluster is not None:
        _require_kind_cluster(kind_cluster)
    if containerd is not None:
        _require_containerd(containerd)
    with staging_dir(plan.context) as staging:
        for note in plan.notes:
            echo(f"kubetrain: {note}")
        echo(f"kubetrain: assembling the build context from {plan.context}")
        assembled = assemble(plan, staging, _local_id(engine, plan.base_image), selection)
        ref = assembled.ref
        if assembled.left_out.left_out:
            echo(f"kubetrain: left out of the build context: {assembled.left_out.left_out_summary()}")
        echo(f"kubetrain: {assembled.files} files, content hash {assembled.digest[:16]} → {ref}")
        in_registry = push and _remote_exists(engine, ref)
        built = False
        if in_registry:
            echo(f"kubetrain: {ref} is already in the registry; not building")
        elif _exists(engine.local_exists(ref)):
            echo(f"kubetrain: {ref} already exists locally ({engine.name}); not building")
        else:
            _run_build(engine, plan, assembled, echo)
            built = True
        if push and not in_registry:
            login = f"`{engine.name} login {ref.split('/')[0]}`"
            check_streamed(engine.push(ref), f"pushing {ref}", echo=echo,
                           hint=f"log in first ({login}) if the registry needs it")
        if kind_cluster is not None:
            _kind_load(engine, ref, kind_cluster, staging, echo)
        if containerd is not None:
            containerd_load(engine, ref, containerd, staging, echo)
    return BuildResult(ref, built, push and not in_registry, kind_cluster is not None, containerd is not None)


def _run_build(engine: Builder, plan: BuildPlan, assembled: Assembled, echo: Echo) -> None:
    argv = engine.build(dockerfile=assembled.dockerfile, context=assembled.context, ref=assembled.ref,
                        build_args=plan.build_args, platform=plan.platform)
    echo(f"kubetrain: {command_line(argv)}")
    tracker = StepTracker()
    code, tail = run_streamed(argv, echo=echo, tracker=tracker)
    if code != 0:
        where = f" at step {tracker.step}" if tracker.step else ""
        raise CommandFailed(f"{engine.name} build failed{where} (exit code {code}); its last lines:", tail)


def _local_id(engine: Builder, image: str | None) -> str | None:
    """The ID (config digest) of a local base image, so that rebuilding the base under the same name changes
    the tag; None when it is not local (the builder will pull it: its name is all there is to hash)."""
    if not image:
        return None
    result = run_captured(engine.image_id(image))
    lines = result.stdout.split()
    return lines[0] if result.code == 0 and lines else None


def _exists(argv: list[str]) -> bool:
    return run_captured(argv).code == 0


def _remote_exists(engine: Builder, ref: str) -> bool:
    argv = engine.remote_exists(ref)
    return argv is not None and _exists(argv)


def _require_kind_cluster(name: str) -> None:
    if not shutil.which("kind"):
        raise ToolMissing(f"kind is not installed (not found on PATH): {KIND_HINT}")
    result = run_captured(["kind", "get", "clusters"])
    if result.code != 0:
        raise CommandFailed(f"`kind get clusters` exited {result.code}", result.stderr.splitlines()[-5:])
    if name not in result.stdout.split():
        raise CommandFailed(f"kind cluster {name!r} not found; "
                            f"create it with `kubetrain cluster create --name {name}`")


def _kind_load(engine: Builder, ref: str, cluster: str, staging: Path, echo: Echo) -> None:
    """podman and buildah send a node only the layers it lacks when it holds the image's lower ones (a code
    change: megabytes, not the gigabytes of a torch image); otherwise docker images load straight from the
    daemon and other builders go through a docker-archive tarball."""
    what = f"loading {ref} into kind cluster {cluster}"
    if engine.name == "docker":
        check_streamed(["kind", "load", "docker-image", ref, "--name", cluster], what, echo=echo)
        return
    provider = node_engine()
    nodes = [name for name in kind_nodes(cluster)
             if not load_into_node(engine, ref, Node(provider, name), staging, echo)]
    if not nodes:
        return
    load = ["kind", "load", "image-archive", "/dev/stdin", "--name", cluster, "--nodes", ",".join(nodes)]
    if engine.name == "podman" and len(nodes) == 1:
        # kind opens the archive once per node, so a pipe serves one node only (`--cpu-only`): no tarball
        # of gigabytes on disk, and the save and the node's import run at the same time.
        echo(f"kubetrain: podman save {ref} | {command_line(load)}")
        check_piped(["podman", "save", ref], load, (f"saving {ref}", what), echo=echo)
        return
    archive = staging / "image.tar"
    check_streamed(engine.save(ref, archive), f"saving {ref} to {archive.name}", echo=echo)
    check_streamed([*load[:3], str(archive), *load[4:]], what, echo=echo)


def _require_containerd(address: str) -> None:
    if not shutil.which("ctr"):
        raise ToolMissing(f"ctr is not installed (not found on PATH): {CTR_HINT}")
    result = run_captured(["ctr", "--address", address, "version"])
    if result.code != 0:
        last = (result.stderr.strip() or result.stdout.strip()).splitlines()[-1:]
        raise CommandFailed(f"--containerd {address}: containerd is not reachable there", last)


@contextmanager
def staging_dir(context: Path) -> Iterator[Path]:
    """A temporary directory beside the context (so hard links work), else in the system temp dir."""
    parent = context / STATE_DIR
    try:
        parent.mkdir(exist_ok=True)
        path = Path(tempfile.mkdtemp(prefix="build-", dir=parent))
    except OSError:
        path = Path(tempfile.mkdtemp(prefix="kubetrain-build-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
