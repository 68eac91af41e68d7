"""The cause a failed local run's ending gives for its first failed rank (kubetrain.local.endings), and the
ending line built from it."""

from __future__ import annotations

import pytest

from kubetrain.cli.run_cmd import ending
from kubetrain.local import endings
from kubetrain.local.endings import RankFailure, RankTails

TRACEBACK = ["[rank1]: Traceback (most recent call last):", '[rank1]:   File "train.py", line 9, in <module>',
             "[rank1]:     torch.save(state, path)", "[rank1]: OSError: [Errno 28] No space left on device", ""]


def test_a_full_disk_wins_over_the_exit_status_and_the_tail_drops_torchs_rank_prefix() -> None:
    failure = RankFailure(node=2, rank=1, code=1, lines=["step 3", *TRACEBACK])
    assert ending(1, None, failure) == (
        "exited with 1: node-2 rank 1 ran out of disk space (ENOSPC: No space left on device)")
    assert failure.tail() == ["step 3", "Traceback (most recent call last):",
                              '  File "train.py", line 9, in <module>', "    torch.save(state, path)",
                              "OSError: [Errno 28] No space left on device"]


def test_signals_are_named_and_a_sigkill_is_out_of_memory_only_when_the_cgroup_counted_one() -> None:
    assert RankFailure(1, 0, 137).cause() == "was killed by SIGKILL (out of memory?)"
    assert RankFailure(1, 0, 137).cause(oom_killed=True) == (
        "was killed by SIGKILL: out of memory (the kernel's OOM killer)")
    assert RankFailure(1, 0, 139).cause() == "was killed by SIGSEGV"
    assert RankFailure(1, 0, 143).cause() == "was stopped by SIGTERM"
    assert RankFailure(1, 0, 2).cause() == "failed first (exit code 2)"


def test_the_first_failure_reported_is_the_one_named() -> None:
    tails = RankTails()
    tails.line(2, 1, "saving checkpoint")
    tails.failed(2, "kubetrain.runtime.launch: rank 1 exited with 137")
    tails.failed(1, "kubetrain.runtime.launch: rank 0 exited with 1")
    assert tails.first_failure() == RankFailure(2, 1, 137, ["saving checkpoint"])


def test_a_diverged_or_successful_run_keeps_its_ending() -> None:
    assert ending(0, None, None) == "succeeded"
    assert ending(65, "diverged at step 8: loss nan", None) == "diverged at step 8: loss nan; exit code 65"


def test_an_oom_kill_is_only_claimed_when_the_cgroup_counter_rose(monkeypatch: pytest.MonkeyPatch) -> None:
    counts = iter([7, 3, 4])  # the counter after: no reading before, unchanged, one more
    monkeypatch.setattr(endings, "oom_kills", lambda: next(counts))
    assert not endings.oom_killed_since(None)
    assert not endings.oom_killed_since(3)
    assert endings.oom_killed_since(3)
