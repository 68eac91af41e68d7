"""Volumes (pkg/apis/core/validation/validation.go: ValidateVolumes, validateVolumeSource,
validateHostPathVolumeSource, validateSecretVolumeSource, validateConfigMapVolumeSource,
validatePersistentClaimVolumeSource, validateEmptyDirVolumeSource, validateKeyToPath)."""

from __future__ import annotations

from typing import Any

from kubetrain.fieldpath import PathKey
from kubetrain.rules.findings import Finding
from kubetrain.rules.k8s import names
from kubetrain.rules.k8s.base import Findings, check, enum, is_int, mapping, named
from kubetrain.rules.k8s.containers import non_reserved_path_problem
from kubetrain.rules.k8s.versions import LATEST, Rules
from kubetrain.rules.quantity import parse_quantity

SOURCES = ("hostPath", "emptyDir", "gcePersistentDisk", "awsElasticBlockStore", "gitRepo", "secret", "nfs",
           "iscsi", "glusterfs", "persistentVolumeClaim", "rbd", "flexVolume", "cinder", "cephfs", "flocker",
           "downwardAPI", "fc", "azureFile", "configMap", "vsphereVolume", "quobyte", "azureDisk",
           "photonPersistentDisk", "projected", "portworxVolume", "scaleIO", "storageos", "csi", "ephemeral",
           "image")
MODE_MAX = 0o777
HOST_PATH_TYPES = ("", "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket", "CharDevice",
                   "BlockDevice")


def volume_names(pod_spec: dict[str, Any]) -> set[str]:
    return {str(v.get("name")) for v, _ in named(pod_spec.get("volumes"), ())}


def empty_dir_names(pod_spec: dict[str, Any]) -> set[str]:
    """Volumes that are emptyDirs, counting those without a source (SetDefaults_Volume makes them one)."""
    return {str(v.get("name")) for v, _ in named(pod_spec.get("volumes"), ())
            if v.get("emptyDir") is not None or not any(v.get(s) is not None for s in SOURCES)}


def volumes(value: Any, path: PathKey, *, partial: bool = False, rules: Rules = LATEST) -> Findings:
    seen: set[str] = set()
    for volume, where in named(value, path):
        name = volume.get("name")
        if not name:
            yield Finding((*where, "name"), "Required value")
        elif isinstance(name, str):
            yield from check((*where, "name"), names.dns1123_label(name))
            if name in seen:
                yield Finding((*where, "name"), f"Duplicate value: {name!r}")
            seen.add(name)
        yield from volume_source(volume, where, partial=partial)
        if volume.get("image") is not None and not rules.image_volumes:
            # dropImageVolumes runs after defaulting, so no emptyDir takes the dropped source's place
            yield Finding((*where, "image"), f"not supported by {rules.name}: ImageVolume is off by default there "
                          "(on in 1.35), so the volume is left without a source (must specify a volume type)")


def volume_source(volume: dict[str, Any], path: PathKey, *, partial: bool) -> Findings:
    present = [s for s in SOURCES if volume.get(s) is not None]
    if len(present) > 1:
        yield Finding((*path, present[1]), f"may not specify more than 1 volume type (found {', '.join(present)})")
    # No source is not an error: the API server defaults such a volume to an emptyDir (SetDefaults_Volume).
    if isinstance(volume.get("hostPath"), dict):
        source = volume["hostPath"]
        if not source.get("path"):
            yield Finding((*path, "hostPath", "path"), "Required value")
        elif isinstance(source["path"], str) and ".." in source["path"].split("/"):
            yield Finding((*path, "hostPath", "path"), "must not contain '..'")
        kind = source.get("type")
        if kind is not None and kind not in HOST_PATH_TYPES:
            yield Finding((*path, "hostPath", "type"), f"Unsupported value {kind!r}")
    if isinstance(volume.get("image"), dict):
        # validateImageVolumeSource: the reference is required of a Pod (so of every pod a template makes)
        if not volume["image"].get("reference"):
            yield Finding((*path, "image", "reference"), "Required value")
        yield from enum(volume["image"], "pullPolicy", (*path, "image"), ("Always", "Never", "IfNotPresent"))
    yield from _empty_dir(volume.get("emptyDir"), (*path, "emptyDir"))
    yield from _projection(volume.get("secret"), (*path, "secret"), "secretName")
    yield from _projection(volume.get("configMap"), (*path, "configMap"), "name")
    claim = volume.get("persistentVolumeClaim")
    if isinstance(claim, dict) and not claim.get("claimName"):
        yield Finding((*path, "persistentVolumeClaim", "claimName"), "Required value")


def _empty_dir(source: Any, path: PathKey) -> Findings:
    limit = mapping(source).get("sizeLimit")
    if isinstance(limit, str | int | float) and not isinstance(limit, bool):
        try:
            if parse_quantity(limit) < 0:
                yield Finding((*path, "sizeLimit"), f"{limit!r}: must be greater than or equal to 0")
        except ValueError:
            pass  # the schema's quantity pattern reports it


def _projection(source: Any, path: PathKey, name_key: str) -> Findings:
    """Secret and ConfigMap volumes: a name, a file mode, and items of key -> relative path."""
    if not isinstance(source, dict):
        return
    if not source.get(name_key):  # required, but not checked as a name (validateSecretVolumeSource)
        yield Finding((*path, name_key), "Required value")
    yield from _mode(source, "defaultMode", path)
    for item, where in named(source.get("items"), (*path, "items")):
        if not item.get("key"):
            yield Finding((*where, "key"), "Required value")
        item_path = item.get("path")
        if not item_path:
            yield Finding((*where, "path"), "Required value")
        elif isinstance(item_path, str):
            yield from check((*where, "path"), non_reserved_path_problem(item_path))
        yield from _mode(item, "mode", where)


def _mode(obj: dict[str, Any], key: str, path: PathKey) -> Findings:
    mode = obj.get(key)
    if is_int(mode) and not 0 <= mode <= MODE_MAX:
        yield Finding((*path, key), f"{mode}: must be a number between 0 and 0777 (octal), both inclusive")
