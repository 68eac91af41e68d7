"""kubetrain gpu on what only real GPUs print: MIG mode ([N/A] utilization, slices listed by `nvidia-smi -L` under
their parent) and boards that report [N/A] / [Not Supported]. The exec is the boundary faked here; its output is
in NVIDIA's documented format (tests/jobs/fixtures/nvidia-smi/, each file names its source)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kubetrain.jobs.gpu import (
    COMMAND,
    LIST_COMMAND,
    ExecResult,
    Gpu,
    MigSlice,
    parse_list,
    parse_query,
    pod_gpus,
    table_rows,
)
from kubetrain.jobs.pods import Replica

FIXTURES = Path(__file__).parent / "fixtures" / "nvidia-smi"


def fixture(name: str) -> str:
    """The recorded output, without the header lines that cite its source."""
    return "".join(line for line in (FIXTURES / name).read_text().splitlines(keepends=True)
                   if not line.startswith("#"))


def replica(gpus: int = 1) -> Replica:
    return Replica("worker-0", "worker", 0, "j-worker-0", "uid", "pytorch", "Running", "gpu-node-1", 0, "running",
                   "", None, gpus)


class FakeExec:
    """Answers each command with its fixture, like kubectl exec would; records what was run."""

    def __init__(self, outputs: dict[tuple[str, ...], ExecResult]) -> None:
        self.outputs = outputs
        self.commands: list[tuple[str, ...]] = []

    def __call__(self, core: Any, namespace: str, pod: str, container: str,
                 command: list[str] = COMMAND) -> ExecResult:
        self.commands.append(tuple(command))
        return self.outputs[tuple(command)]


def test_query_fixture_columns_are_what_the_code_asks_for() -> None:
    header = (FIXTURES / "a100-mig-query.txt").read_text().splitlines()[1]
    assert header.strip().lstrip("# ").strip() == " ".join(COMMAND)


def test_a_mig_gpu_shows_its_slices_and_says_utilization_is_not_supported() -> None:
    run = FakeExec({tuple(COMMAND): ExecResult(fixture("a100-mig-query.txt"), "", 0),
                    tuple(LIST_COMMAND): ExecResult(fixture("a100-mig-list.txt"), "", 0)})
    result = pod_gpus(None, "ml", replica(), run)  # type: ignore[arg-type]
    assert run.commands == [tuple(COMMAND), tuple(LIST_COMMAND)]
    assert result.message == ""
    [gpu] = result.gpus
    assert gpu.mig and gpu.utilization is None and gpu.memory_total == 40960.0
    assert gpu.slices == (MigSlice(0, "3g.20gb", "MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f"),)
    assert table_rows([result]) == [
        ["worker-0", "0", "NVIDIA A100-SXM4-40GB", "not supported (MIG)", "0.0/40.0 GiB", "33°C", "62 W"],
        ["worker-0", "0/0", "MIG 3g.20gb MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f", "", "", "", ""],
    ]
    assert result.as_dict()["gpus"][0]["slices"] == [
        {"device": 0, "profile": "3g.20gb", "uuid": "MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f"}]


def test_without_mig_no_second_exec_and_unreported_fields_say_so() -> None:
    run = FakeExec({tuple(COMMAND): ExecResult(fixture("mixed-query.txt"), "", 0)})
    result = pod_gpus(None, "ml", replica(3), run)  # type: ignore[arg-type]
    assert run.commands == [tuple(COMMAND)]
    assert result.gpus == [Gpu(0, "NVIDIA H100 80GB HBM3", 87.0, 30000.0, 81559.0, 52.0, 512.37),
                           Gpu(1, "Tesla T4", 0.0, 10.0, 15360.0, 40.0, None),
                           Gpu(2, "Tesla V100-SXM2-16GB", None, 0.0, 16384.0, 35.0, 42.1)]
    assert [row[3] for row in table_rows([result])] == ["87%", "0%", "not supported"]
    assert [row[6] for row in table_rows([result])] == ["512 W", "n/a", "42 W"]


def test_a_whole_partitioned_node_lists_every_slice_under_its_parent() -> None:
    slices = parse_list(fixture("a100-mig-node-list.txt"))
    assert sorted(slices) == [0, 1, 2]
    assert [s.device for s in slices[0]] == list(range(7)) and {s.profile for s in slices[0]} == {"1g.5gb"}
    assert slices[1] == (MigSlice(0, "7g.40gb", "MIG-GPU-0b2c3d4e-1111-2222-3333-444455556666/0/0"),)
    assert slices[2] == ()


@pytest.mark.parametrize(("listing", "message"), [
    (ExecResult("", "Failed to initialize NVML: Insufficient Permissions\n", 4),
     "MIG enabled, but nvidia-smi -L failed (exit 4): Failed to initialize NVML: Insufficient Permissions"),
    (ExecResult("something else entirely\n", "", 0), "MIG enabled: unexpected nvidia-smi -L output"),
])
def test_a_failed_listing_keeps_the_gpus_and_says_why(listing: ExecResult, message: str) -> None:
    run = FakeExec({tuple(COMMAND): ExecResult(fixture("a100-mig-query.txt"), "", 0), tuple(LIST_COMMAND): listing})
    result = pod_gpus(None, "ml", replica(), run)  # type: ignore[arg-type]
    assert [g.index for g in result.gpus] == [0] and result.gpus[0].slices == ()
    assert result.message.startswith(message)


def test_the_old_seven_column_output_is_refused_not_misread() -> None:
    with pytest.raises(ValueError, match="unexpected nvidia-smi output"):
        parse_query("0, NVIDIA H100 80GB HBM3, 87, 30000, 81559, 52, 512.37\n")


def test_a_real_h200s_output_is_read_as_it_was() -> None:
    """nvidia-smi on a real H200 (the first real output this parser saw; the files name where it came from)."""
    header = (FIXTURES / "h200-query.txt").read_text().splitlines()[1]
    assert header.lstrip("# ").strip() == " ".join(COMMAND)
    run = FakeExec({tuple(COMMAND): ExecResult(fixture("h200-query.txt"), "", 0),
                    tuple(LIST_COMMAND): ExecResult(fixture("h200-list.txt"), "", 0)})
    result = pod_gpus(None, "ml", replica(), run)  # type: ignore[arg-type]
    assert run.commands == [tuple(COMMAND)] and result.message == ""  # MIG Disabled: no listing asked for
    [gpu] = result.gpus
    assert (gpu.name, gpu.mig, gpu.utilization, gpu.memory_total) == ("NVIDIA H200", False, 0.0, 143771.0)
    assert table_rows([result]) == [["worker-0", "0", "NVIDIA H200", "0%", "0.0/140.4 GiB", "41°C", "81 W"]]
    assert parse_list(fixture("h200-list.txt")) == {0: ()}  # the GPU, with no MIG slices
