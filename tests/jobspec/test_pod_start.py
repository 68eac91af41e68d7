"""Specs whose pods cannot start or whose checkpoints would die with the pod are refused when loaded (so by
`validate`, `render`, `submit` and `run` alike), each with the field, its line and the fix in one line."""

from __future__ import annotations

import textwrap

import pytest

from kubetrain.errors import SpecError
from kubetrain.jobspec.load import parse_spec

BASE = textwrap.dedent("""\
    apiVersion: kubetrain.dev/v1alpha1
    kind: TrainingJob
    metadata: {name: job}
    spec:
      image: ghcr.io/acme/job:1.0
      command: [python, train.py]
    """)
VOLUME = "  volumes: [{name: ckpt, claim: ckpt-pvc, mountPath: /ckpt}]\n"


def problems(extra: str, base: str = BASE) -> list[str]:
    with pytest.raises(SpecError) as info:
        parse_spec(base + extra, "kubetrain.yaml")
    return info.value.lines()


@pytest.mark.parametrize("mount", ["/", "/usr", "/usr/local", "/bin", "/etc", "/lib", "/lib64", "/sbin", "/opt",
                                   "/var", "/proc", "/sys"])
def test_a_code_mount_that_shadows_the_images_system_directories_is_refused(mount: str) -> None:
    assert problems(f"  code: {{mountPath: {mount}}}\n") == [
        f"kubetrain.yaml:7: spec.code.mountPath: {mount} would hide the image's own files there (python, torch, "
        "the system's libraries) and the pod could not start; use a directory of its own, e.g. /workspace"]


def test_a_volume_over_a_system_directory_is_refused_but_one_under_a_mount_of_its_own_is_fine() -> None:
    lines = problems("  volumes: [{name: data, claim: d, mountPath: /usr/share}]\n")
    assert lines == ["kubetrain.yaml:7: spec.volumes[0].mountPath: /usr/share would hide the image's own files "
                     "there (python, torch, the system's libraries) and the pod could not start; use a directory "
                     "of its own, e.g. /data"]
    assert parse_spec(BASE + "  code: {mountPath: /srv/code}\n  volumes: [{name: d, claim: d, mountPath: /data}]\n")


def test_a_grace_period_shorter_than_the_stop_checkpoint_is_refused() -> None:
    assert problems(VOLUME + "  checkpoint: {dir: /ckpt/run}\n  terminationGracePeriodSeconds: 20\n") == [
        "kubetrain.yaml:9: spec.terminationGracePeriodSeconds: 20 s leaves the stop checkpoint "
        "(checkpoint.sigtermTimeoutSeconds: 25 s) no time before SIGKILL; set it above 25, e.g. 55, or lower "
        "checkpoint.sigtermTimeoutSeconds"]
    parse_spec(BASE + VOLUME + "  checkpoint: {dir: /ckpt/run, sigtermTimeoutSeconds: 10}\n"
               "  terminationGracePeriodSeconds: 20\n")
    parse_spec(BASE + "  terminationGracePeriodSeconds: 5\n")  # no checkpointing: no stop checkpoint to wait for


@pytest.mark.parametrize("command", ["[python]", "[python3]", "[python, -u]", "[/usr/bin/python3.11]"])
def test_a_python_with_no_program_is_refused(command: str) -> None:
    text = BASE.replace("[python, train.py]", command)
    assert problems("", text) == [
        f"kubetrain.yaml:6: spec.command: {command.strip('[]').split(',')[0]} with no script or module runs nothing "
        "(it reads an empty stdin and exits 0); name the program: [python, train.py] or [python, -m, train]"]


@pytest.mark.parametrize("command", ["[python, -u, train.py]", "[python, -m, train]", "[python, -mtrain]",
                                     "[python, -c, 'import train']"])
def test_python_with_a_program_is_fine(command: str) -> None:
    parse_spec(BASE.replace("[python, train.py]", command))


def test_the_program_may_come_from_args() -> None:
    parse_spec(BASE.replace("[python, train.py]", "[python]") + "  args: [train.py]\n")


# ---- checkpoints must outlive the pod ----------------------------------------------------------------------
def test_a_checkpoint_dir_on_no_volume_is_refused_with_the_fix() -> None:
    assert problems("  checkpoint: {dir: /ckpt/run}\n") == [
        "kubetrain.yaml:7: spec.checkpoint.dir: /ckpt/run is on no volume, so its checkpoints die with the pod: "
        "add volumes: [{name: ckpt, claim: CLAIM, mountPath: /ckpt}], use an object store (s3://BUCKET/PREFIX), "
        "or set checkpoint.ephemeral: true for a scratch run"]


def test_a_checkpoint_dir_on_the_read_only_code_mount_is_refused() -> None:
    assert problems("  code: {path: .}\n  checkpoint: {dir: /workspace/ckpt, ephemeral: true}\n") == [
        "kubetrain.yaml:8: spec.checkpoint.dir: /workspace/ckpt is on the read-only code mount (code.mountPath "
        "/workspace): the first checkpoint would fail (EROFS); put it on a volume, e.g. /ckpt/run"]


def test_a_relative_checkpoint_dir_is_refused() -> None:
    assert problems("  code: {path: .}\n  checkpoint: {dir: ckpt}\n") == [
        "kubetrain.yaml:8: spec.checkpoint.dir: 'ckpt' is relative: in the pod it is under the working directory, "
        "the read-only code mount /workspace; use an absolute path on a volume (e.g. /ckpt/run) or an object "
        "store URL"]


def test_a_checkpoint_dir_on_a_read_only_volume_is_refused() -> None:
    assert problems("  volumes: [{name: ckpt, claim: c, mountPath: /ckpt, readOnly: true}]\n"
                    "  checkpoint: {dir: /ckpt/run}\n") == [
        "kubetrain.yaml:8: spec.checkpoint.dir: /ckpt/run is on the read-only volume 'ckpt' (spec.volumes[0]): "
        "the first checkpoint would fail (EROFS); mount it with readOnly: false"]


@pytest.mark.parametrize("extra", [
    VOLUME + "  checkpoint: {dir: /ckpt}\n",
    VOLUME + "  checkpoint: {dir: /ckpt/run/}\n",
    "  checkpoint: {dir: 's3://bucket/run'}\n",
    "  checkpoint: {dir: /scratch/run, ephemeral: true}\n",
    "  checkpoint: {everySteps: 5}\n",
])
def test_checkpoint_dirs_that_outlive_the_pod_or_say_they_need_not(extra: str) -> None:
    parse_spec(BASE + extra)


def test_a_volume_whose_mount_path_is_only_a_name_prefix_does_not_count() -> None:
    assert problems("  volumes: [{name: ckpt, claim: c, mountPath: /ck}]\n  checkpoint: {dir: /ckpt/run}\n")[0] \
        .startswith("kubetrain.yaml:8: spec.checkpoint.dir: /ckpt/run is on no volume")
