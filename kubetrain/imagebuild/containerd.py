"""`kubetrain build --containerd SOCKET`: load the image into a containerd, sending only the layers it lacks.

A training image is gigabytes of base + torch under a few hundred kilobytes of kubetrain and user code.
Saving the whole image to a tarball and importing it costs minutes for every code change, although
containerd keeps blobs by digest and already has every unchanged layer. So, with podman or buildah:

1. read which layer blobs this containerd has, and their sizes, from the manifests of its images;
2. put a *sparse* placeholder of the right size for each into an empty directory;
3. `podman push REF oci:DIR:TAG`: containers/image skips every blob the destination already has (it only
   stats the file), so it writes the manifest, the config and the new layers (gzip-compressed);
4. import an OCI-layout tarball of just those blobs (`ctr images import`): containerd's importer stores the
   blobs it gets and finds the others in its content store by digest; unpacking skips every layer whose
   snapshot exists.

A containerd with no layer at all gets the whole image through `podman push REF dir:DIR` instead: the same
blobs, uncompressed (gzip of gigabytes costs minutes), in one copy on disk. So does a containerd that lacks
the image's lower layers *as stored* (uncompressed, by diff ID): step 3 matches blobs by the digest of the
layer in podman's storage, so layers that reached containerd gzip-compressed (from an earlier step 3, e.g.
after the base image was rebuilt) are never matched, and every later load would gzip the whole image again.
(`dir:` cannot take the placeholders: containers/image empties a non-empty `dir:` destination first.)
docker and nerdctl go through `docker save`'s archive, as `kind load image-archive` does.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubetrain.imagebuild.builders import DIR_PUSHERS, Builder
from kubetrain.imagebuild.process import CommandFailed, Echo, check_streamed, command_line, run_captured, run_streamed
from kubetrain.imagebuild.reference import split_reference

# The containerd namespace the kubelet's CRI plugin reads images from.
CRI_NAMESPACE = "k8s.io"
_MANIFEST_TYPES = ("application/vnd.oci.image.manifest.v1+json",
                   "application/vnd.docker.distribution.manifest.v2+json")
_REF_NAME = "org.opencontainers.image.ref.name"


def load(engine: Builder, ref: str, address: str, staging: Path, echo: Echo) -> None:
    """Make `ref` an image of the containerd at `address` (namespace k8s.io), unless it has it already:
    tags are content hashes, so the same tag is the same image."""
    ctr = Ctr(["ctr", "--address", address])
    what = f"loading {ref} into containerd at {address}"
    if ctr.has_image(ref):
        echo(f"kubetrain: {ref} is already in containerd at {address}; not loading")
        return
    if engine.name not in DIR_PUSHERS:
        archive = staging / "image.tar"
        check_streamed(engine.save(ref, archive), f"saving {ref} to {archive.name}", echo=echo)
        ctr.import_archive(archive, [], what, echo)
        return
    known = ctr.known_layers()
    missing = _missing_lower_layers(engine, ref, known)
    if known and missing != 0:
        echo(f"kubetrain: containerd lacks {missing if missing else 'the'} lower layer(s) of {ref} as stored; "
             "copying the image uncompressed (no gzip), so that later loads send only new layers")
    _send_new_blobs(engine, ref, ctr, (known, missing == 0), staging, what, echo)


def load_into_node(engine: Builder, ref: str, node: Node, staging: Path, echo: Echo) -> bool:
    """Load `ref` into a kind node's containerd (reached with `<node engine> exec`) when that is cheap: the
    node has it already, or has every layer of it but the top few (a code change), which alone are sent.
    False when the node lacks lower layers: the caller sends the whole image its own way."""
    ctr = Ctr([node.engine, "exec", "-i", node.name, "ctr"])
    if ctr.has_image(ref):
        echo(f"kubetrain: {ref} is already in kind node {node.name}; not loading")
        return True
    known = ctr.known_layers() if engine.name in DIR_PUSHERS else {}
    if _missing_lower_layers(engine, ref, known) != 0:
        return False
    _send_new_blobs(engine, ref, ctr, (known, True), staging, f"loading {ref} into kind node {node.name}", echo)
    return True


def _send_new_blobs(engine: Builder, ref: str, ctr: Ctr, known: tuple[dict[str, int], bool], staging: Path,
                    what: str, echo: Echo) -> None:
    """Send every blob of `ref` but the known ones; known = (digest → size, whether they hold every lower
    layer as stored: only then is the image copied out gzip-compressed, skipping them)."""
    archive, sent = _new_blobs_archive(engine, ref, known, staging, echo)
    echo(f"kubetrain: {ctr.where} has {len(known[0])} layer blob(s) already; sending {len(sent)} blob(s), "
         f"{sum(sent) / 2**20:.1f} MiB")
    ctr.import_archive(archive, ["--base-name", split_reference(ref)[0]], what, echo)


@dataclass(frozen=True)
class Node:
    """A kind node: its container's name and the engine that runs it (docker or podman)."""

    engine: str
    name: str


class Ctr:
    """`ctr ... --namespace k8s.io ...`, `ctr` being `base`: a local ctr with an address, or one run in a
    kind node through `<engine> exec -i NODE ctr`."""

    def __init__(self, base: list[str]) -> None:
        self.prefix = [*base, "--namespace", CRI_NAMESPACE]
        self.local = base[0] == "ctr"
        self.where = "containerd" if self.local else f"kind node {base[-2]}"

    def output(self, *args: str) -> str:
        result = run_captured([*self.prefix, *args])
        return result.stdout if result.code == 0 else ""

    def has_image(self, ref: str) -> bool:
        return ref in self.output("images", "ls", "-q", f"name=={ref}").split()

    def import_archive(self, archive: Path, options: list[str], what: str, echo: Echo) -> None:
        """`ctr images import`: of the file itself when ctr runs here, else of stdin (a node's ctr cannot
        see this machine's files)."""
        argv = [*self.prefix, "images", "import", *options]
        if self.local:
            check_streamed([*argv, str(archive)], what, echo=echo)
            return
        with archive.open("rb") as source:
            code, tail = run_streamed([*argv, "-"], echo=echo, stdin=source)
        if code != 0:
            raise CommandFailed(f"{what} failed: `{command_line([*argv, '-'])}` exited {code}", tail)

    def known_layers(self) -> dict[str, int]:
        """digest → size of every layer blob in the content store that one of its images uses."""
        present = set(self.output("content", "ls", "-q").split())
        layers: dict[str, int] = {}
        for line in self.output("images", "ls").splitlines()[1:]:
            fields = line.split()
            if len(fields) >= 3 and fields[2] in present:
                layers.update((d["digest"], int(d["size"])) for d in self._layers(fields[2]))
        return {digest: size for digest, size in layers.items() if digest in present}

    def _layers(self, digest: str, depth: int = 0) -> list[dict[str, Any]]:
        """The layer descriptors of a manifest, or of every manifest of an index (one level deep)."""
        try:
            doc = json.loads(self.output("content", "get", digest) or "{}")
        except ValueError:
            return []
        if "layers" in doc:
            return list(doc["layers"])
        if depth == 0:
            return [layer for m in doc.get("manifests", []) if m.get("mediaType") in _MANIFEST_TYPES
                    for layer in self._layers(m["digest"], 1)]
        return []


def _new_blobs_archive(engine: Builder, ref: str, known: tuple[dict[str, int], bool], staging: Path,
                       echo: Echo) -> tuple[Path, list[int]]:
    """An OCI-layout tarball of `ref` with every blob but the known ones; (its path, sizes of blobs sent)."""
    tag = split_reference(ref)[1] or "latest"
    archive = staging / "image-new-blobs.tar"
    blobs_known, lower = known
    try:
        if lower:
            blobs, index = _push_oci(engine, ref, tag, blobs_known, staging / "image-oci", echo)
        else:
            blobs, index = _push_dir(engine, ref, tag, staging / "image-dir", echo)
        return archive, _write_layout(blobs, index, set(d.partition(":")[2] for d in blobs_known), archive)
    except (OSError, KeyError, ValueError) as exc:
        raise CommandFailed(f"writing {archive.name} from {engine.name}'s copy of {ref}: {exc}") from None


# The image's top layers that may be new for a code or requirements change (kubetrain, the user's code and
# requirements, their small neighbours): only these are worth gzip-compressing in step 3.
NEW_TOP_LAYERS = 4


def _missing_lower_layers(engine: Builder, ref: str, known: dict[str, int]) -> int | None:
    """How many layers of `ref` below its top few containerd lacks as stored (uncompressed, by diff ID);
    None when there is nothing to compare (no known layer, or the builder does not list the image's)."""
    result = run_captured(engine.layer_digests(ref)) if known else None
    try:
        layers = [str(d) for d in json.loads(result.stdout)] if result and result.code == 0 else []
    except ValueError:
        layers = []
    return len([d for d in layers[:-NEW_TOP_LAYERS] if d not in known]) if layers else None


def _push_oci(engine: Builder, ref: str, tag: str, known: dict[str, int], layout: Path,
              echo: Echo) -> tuple[Path, bytes]:
    """`push REF oci:LAYOUT:TAG` over sparse placeholders of the known blobs; (blobs dir, index.json)."""
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    for digest, size in known.items():
        algorithm, _, hexdigest = digest.partition(":")
        if algorithm == "sha256" and len(hexdigest) == 64 and hexdigest.isalnum():
            with (blobs / hexdigest).open("wb") as handle:
                handle.truncate(size)  # sparse: no disk space, only the size containers/image records
    argv = engine.push_oci(ref, layout, tag)
    assert argv is not None  # load() checked the builder
    check_streamed(argv, f"copying {ref} out of {engine.name}'s storage", echo=echo)
    return blobs, (layout / "index.json").read_bytes()


def _push_dir(engine: Builder, ref: str, tag: str, directory: Path, echo: Echo) -> tuple[Path, bytes]:
    """`push REF dir:DIRECTORY` (a fresh containerd: every blob, uncompressed, no gzip of gigabytes);
    (blobs dir, an index.json for its manifest)."""
    argv = engine.push_dir(ref, directory)
    assert argv is not None
    check_streamed(argv, f"copying {ref} out of {engine.name}'s storage", echo=echo)
    manifest = (directory / "manifest.json").read_bytes()
    digest = hashlib.sha256(manifest).hexdigest()
    (directory / digest).write_bytes(manifest)
    index = {"schemaVersion": 2, "manifests": [{
        "mediaType": json.loads(manifest).get("mediaType", _MANIFEST_TYPES[0]), "digest": f"sha256:{digest}",
        "size": len(manifest), "annotations": {_REF_NAME: tag}}]}
    return directory, json.dumps(index).encode()


def _write_layout(blobs: Path, index: bytes, skip: set[str], archive: Path) -> list[int]:
    """An OCI image layout tarball: index.json and every blob but those in `skip`. Each blob is deleted
    once in the tarball, so a full image needs its size on disk once, not twice."""
    sent = []
    with tarfile.open(archive, "w") as tar:
        _add_bytes(tar, "oci-layout", b'{"imageLayoutVersion": "1.0.0"}')
        _add_bytes(tar, "index.json", index)
        for name in sorted(os.listdir(blobs)):
            if len(name) == 64 and name not in skip:
                tar.add(blobs / name, f"blobs/sha256/{name}")
                sent.append((blobs / name).stat().st_size)
                (blobs / name).unlink()
    return sent


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, fileobj=io.BytesIO(data))
