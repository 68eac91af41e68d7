"""`kubetrain build --containerd SOCKET`: load the image into a containerd, sending only the layers it lacks.

A training image is gigabytes of base + torch under a few kilobytes of kubetrain and user code. Saving the
whole image to a tarball and importing it costs minutes for every code change, although containerd keeps
its blobs by digest and already has every unchanged layer. So, with podman or buildah:

1. read which layer blobs this containerd has (and their sizes) from the manifests of its images;
2. put a *sparse* placeholder of the right size for each of them into an empty OCI layout directory;
3. `podman push REF oci:DIR:TAG`: containers/image reuses any blob the destination already has (it only
   stats the file), so it writes just the manifest, the config and the new layers;
4. import a tarball of the layout without the placeholders (`ctr images import`): containerd's importer
   stores the blobs it gets and finds the others in its content store by digest; unpacking skips every
   layer whose snapshot exists.

Without any known layer (a fresh containerd), or with docker/nerdctl, the whole image goes through a
docker-archive tarball, as `kind load image-archive` does.
"""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path
from typing import Any

from kubetrain.build.builders import OCI_PUSHERS, Builder
from kubetrain.build.process import CommandFailed, Echo, check_streamed, run_captured
from kubetrain.build.reference import split_reference

# The containerd namespace the kubelet's CRI plugin reads images from.
CRI_NAMESPACE = "k8s.io"
_MANIFEST_TYPES = ("application/vnd.oci.image.manifest.v1+json",
                   "application/vnd.docker.distribution.manifest.v2+json")


def load(engine: Builder, ref: str, address: str, staging: Path, echo: Echo) -> None:
    """Make `ref` an image of the containerd at `address` (namespace k8s.io), unless it has it already:
    tags are content hashes, so the same tag is the same image."""
    ctr = Ctr(address)
    if ref in ctr.output("images", "ls", "-q", f"name=={ref}").split():
        echo(f"kubetrain: {ref} is already in containerd at {address}; not loading")
        return
    known = ctr.known_layers()
    if known and engine.name in OCI_PUSHERS:
        archive, sent = _partial_archive(engine, ref, known, staging, echo)
        echo(f"kubetrain: {len(known)} layers already in containerd; sending {sent} new blobs")
        ctr.run(["images", "import", "--base-name", split_reference(ref)[0], str(archive)],
                f"loading {ref} into containerd at {address}", echo)
        return
    archive = staging / "image.tar"
    check_streamed(engine.save(ref, archive), f"saving {ref} to {archive.name}", echo=echo)
    ctr.run(["images", "import", str(archive)], f"loading {ref} into containerd at {address}", echo)


class Ctr:
    """`ctr --address A --namespace k8s.io ...`."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.prefix = ["ctr", "--address", address, "--namespace", CRI_NAMESPACE]

    def output(self, *args: str) -> str:
        result = run_captured([*self.prefix, *args])
        return result.stdout if result.code == 0 else ""

    def run(self, args: list[str], what: str, echo: Echo) -> None:
        check_streamed([*self.prefix, *args], what, echo=echo)

    def known_layers(self) -> dict[str, int]:
        """digest → size of every layer blob present in the content store and used by one of its images."""
        present = set(self.output("content", "ls", "-q").split())
        layers: dict[str, int] = {}
        for line in self.output("images", "ls").splitlines()[1:]:
            fields = line.split()
            if len(fields) >= 3 and fields[2] in present:
                for desc in self._layers(fields[2]):
                    layers[desc["digest"]] = int(desc["size"])
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


def _partial_archive(engine: Builder, ref: str, known: dict[str, int], staging: Path,
                     echo: Echo) -> tuple[Path, int]:
    """An OCI-layout tarball of `ref` holding every blob except those in `known`; (its path, blobs sent)."""
    layout = staging / "oci"
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    placeholders = set()
    for digest, size in known.items():
        algorithm, _, hexdigest = digest.partition(":")
        if algorithm == "sha256" and hexdigest.isalnum():
            with (blobs / hexdigest).open("wb") as handle:
                handle.truncate(size)  # sparse: no disk space, only the size containers/image records
            placeholders.add(hexdigest)
    tag = split_reference(ref)[1] or "latest"
    argv = engine.push_oci(ref, layout, tag)
    assert argv is not None  # load() checked
    check_streamed(argv, f"copying {ref} to an OCI layout", echo=echo)
    archive = staging / "image-new-layers.tar"
    sent = 0
    try:
        with tarfile.open(archive, "w") as tar:
            tar.add(layout / "oci-layout", "oci-layout")
            tar.add(layout / "index.json", "index.json")
            for name in sorted(os.listdir(blobs)):
                if name not in placeholders:
                    tar.add(blobs / name, f"blobs/sha256/{name}")
                    sent += 1
    except OSError as exc:
        raise CommandFailed(f"writing {archive}: {exc.strerror or exc}") from None
    return archive, sent
