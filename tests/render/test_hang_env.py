"""What the runtime's hang detection needs in every pod: the progress directory, torch's flight recorder, and
a process-group timeout that fits spec.hang (docs/hangs.md#in-a-cluster)."""

from __future__ import annotations

import json

from tests.render.test_rules import env, pytorchjob

TRAIN = {"model": "examples.digits.model:build_model", "dataset": "examples.digits.data:load"}


def test_every_pod_gets_a_writable_progress_directory_and_the_flight_recorder() -> None:
    obj = pytorchjob(nodes=2)
    for replica in ("Master", "Worker"):
        values = env(obj, replica)
        assert values["KUBETRAIN_PROGRESS_DIR"] == "/tmp/kubetrain-progress"
        assert values["TORCH_FR_DUMP_TEMP_FILE"] == "/tmp/kubetrain-progress/fr-dump-rank-"
        assert values["TORCH_FR_BUFFER_SIZE"] == "2000" and values["TORCH_FR_DUMP_ON_TIMEOUT"] == "1"
        # the deprecated TORCH_NCCL_* names made torch print a warning on every rank
        assert "TORCH_NCCL_TRACE_BUFFER_SIZE" not in values and "TORCH_NCCL_DUMP_ON_TIMEOUT" not in values


def test_a_read_only_root_filesystem_still_has_a_writable_tmp_for_the_records() -> None:
    obj = pytorchjob(security={"readOnlyRootFilesystem": True})
    pod = obj["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    assert {"name": "tmp", "mountPath": "/tmp"} in pod["containers"][0]["volumeMounts"]


def test_the_users_env_wins() -> None:
    values = env(pytorchjob(env={"TORCH_FR_BUFFER_SIZE": "0", "KUBETRAIN_PROGRESS_DIR": "/scratch/p"}))
    assert values["TORCH_FR_BUFFER_SIZE"] == "0"
    assert values["KUBETRAIN_PROGRESS_DIR"] == "/scratch/p"


def _pg_timeout(**spec: object) -> int:
    config = json.loads(env(pytorchjob(command=None, **spec))["KUBETRAIN_CONFIG"])
    return int(config["train"]["timeoutSeconds"])


def test_the_process_group_timeout_follows_spec_hang() -> None:
    assert _pg_timeout(train=TRAIN) == 1800 + 60  # the default phaseTimeoutSeconds + a margin
    assert _pg_timeout(train=TRAIN, hang={"timeoutSeconds": 60, "phaseTimeoutSeconds": 120}) == 180
    assert _pg_timeout(train=TRAIN, hang={"timeoutSeconds": 900, "phaseTimeoutSeconds": 300}) == 960


def test_an_explicit_train_timeout_is_kept() -> None:
    assert _pg_timeout(train={**TRAIN, "timeoutSeconds": 1800}, hang={"phaseTimeoutSeconds": 120}) == 1800
