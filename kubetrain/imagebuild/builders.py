"""Container builders kubetrain can drive, their command lines, and how the first usable one is found."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kubetrain.errors import BuildError
from kubetrain.imagebuild.process import run_captured

BUILDERS = ("docker", "podman", "nerdctl", "buildah")  # detection order
INSTALL_HINT = "install docker or podman (or nerdctl, buildah), or pick one with --builder"
DAEMON_BUILDERS = {"docker", "nerdctl"}  # need a running daemon (podman and buildah are daemonless)
# Builders on containers/image: `push REF oci:DIR:TAG` skips every blob DIR already has (containerd.py).
DIR_PUSHERS = {"podman", "buildah"}


@dataclass(frozen=True)
class Builder:
    """One builder CLI. Methods return argv lists; nothing here runs a command."""

    name: str

    def build(self, *, dockerfile: Path, context: Path, ref: str, build_args: dict[str, str],
              platform: str | None = None) -> list[str]:
        argv = [self.name, "build"]
        if self.name in ("docker", "nerdctl"):
            argv.append("--progress=plain")
        if self.name == "buildah":
            argv.append("--layers")  # cache layers like the others do by default
        if self.name in DIR_PUSHERS:
            # podman/buildah default to the OCI image format, whose config has no SHELL: a Dockerfile's
            # `SHELL [...]` would be dropped (with a warning) for every RUN of images built FROM this one.
            argv += ["--format", "docker"]
        argv += ["-f", str(dockerfile), "-t", ref]
        if platform:
            argv += ["--platform", platform]
        for key, value in build_args.items():
            argv += ["--build-arg", f"{key}={value}"]
        return [*argv, str(context)]

    def local_exists(self, ref: str) -> list[str]:
        return {
            "docker": ["docker", "image", "inspect", ref],
            "podman": ["podman", "image", "exists", ref],
            "nerdctl": ["nerdctl", "image", "inspect", ref],
            "buildah": ["buildah", "inspect", "--type", "image", ref],
        }[self.name]

    def image_id(self, ref: str) -> list[str]:
        """Prints the local image's ID (the digest of its config), or exits non-zero when it is not local."""
        if self.name == "buildah":
            return ["buildah", "inspect", "--type", "image", "--format", "{{.FromImageID}}", ref]
        field = "{{.ID}}" if self.name == "nerdctl" else "{{.Id}}"
        return [self.name, "image", "inspect", "--format", field, ref]

    def layer_digests(self, ref: str) -> list[str]:
        """Prints the local image's layer digests as stored (uncompressed: its rootfs diff IDs), as JSON."""
        if self.name == "buildah":
            return ["buildah", "inspect", "--type", "image", "--format", "{{json .OCIv1.RootFS.DiffIDs}}", ref]
        return [self.name, "image", "inspect", "--format", "{{json .RootFS.Layers}}", ref]

    def remote_exists(self, ref: str, which: Callable[[str], str | None] = shutil.which) -> list[str] | None:
        """A command that exits 0 when the registry has `ref`; None when this builder cannot tell."""
        if self.name == "docker":
            return ["docker", "manifest", "inspect", ref]
        if self.name == "podman":
            return ["podman", "manifest", "inspect", ref]
        if which("skopeo"):
            return ["skopeo", "inspect", "--raw", f"docker://{ref}"]
        return None

    def push(self, ref: str) -> list[str]:
        return [self.name, "push", ref]

    def save(self, ref: str, archive: Path) -> list[str]:
        """Write `ref` as a docker-archive tarball (for `kind load image-archive`)."""
        if self.name == "buildah":
            return ["buildah", "push", ref, f"docker-archive:{archive}:{ref}"]
        return [self.name, "save", "-o", str(archive), ref]

    def push_oci(self, ref: str, layout: Path, tag: str) -> list[str] | None:
        """Copy `ref` into the OCI layout directory `layout` as `tag` (new layers gzip-compressed); None
        when this builder cannot."""
        if self.name not in DIR_PUSHERS:
            return None
        return [self.name, "push", "--format", "oci", ref, f"oci:{layout}:{tag}"]

    def push_dir(self, ref: str, directory: Path) -> list[str] | None:
        """Copy `ref` into `directory` (containers/image's dir: layout, manifest unchanged, layers as stored,
        files named by digest); None when this builder cannot."""
        if self.name not in DIR_PUSHERS:
            return None
        return [self.name, "push", ref, f"dir:{directory}"]

    def daemon_check(self) -> list[str] | None:
        if self.name in DAEMON_BUILDERS:
            return [self.name, "info", "--format", "{{.ServerVersion}}"]
        return None


def detect(chosen: str | None = None, which: Callable[[str], str | None] = shutil.which) -> Builder:
    """The chosen builder, or the first of BUILDERS that is installed and (for docker/nerdctl) running."""
    if chosen is not None and chosen not in BUILDERS:
        raise BuildError(f"--builder {chosen}: unknown builder; choose one of {', '.join(BUILDERS)}")
    installed = [name for name in ([chosen] if chosen else BUILDERS) if which(name)]
    if not installed:
        what = f"{chosen} is not installed (not on PATH)" if chosen else "no container builder found on PATH"
        raise BuildError(f"{what}: {INSTALL_HINT}")
    down: list[str] = []
    for name in installed:
        problem = _daemon_problem(Builder(name))
        if problem is None:
            return Builder(name)
        down.append(problem)
    raise BuildError(f"{'; '.join(down)}: start it, or {INSTALL_HINT}")


def _daemon_problem(builder: Builder) -> str | None:
    argv = builder.daemon_check()
    if argv is None:
        return None
    result = run_captured(argv)
    if result.code == 0:
        return None
    last = (result.stderr.strip() or result.stdout.strip()).splitlines()
    reason = last[-1] if last else f"exit code {result.code}"
    return f"{builder.name} is installed but its daemon is not reachable ({reason})"
