"""The recording fakes behave like the tools they stand in for: an unknown command fails loudly."""

from __future__ import annotations

import subprocess

from recording import FakeBin


def _run(fakebin: FakeBin, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(fakebin.dir / argv[0]), *argv[1:]], capture_output=True, text=True,
                          env=fakebin.env(), check=False)


def test_a_known_subcommand_without_a_rule_succeeds_and_is_recorded(fakebin: FakeBin) -> None:
    fakebin.install("kubectl")
    assert _run(fakebin, "kubectl", "--context", "kind-x", "apply", "-f", "-").returncode == 0
    assert fakebin.argvs() == [["kubectl", "--context", "kind-x", "apply", "-f", "-"]]


def test_an_unknown_subcommand_fails_like_the_real_tool(fakebin: FakeBin) -> None:
    fakebin.install("docker")
    done = _run(fakebin, "docker", "biuld", ".")
    assert done.returncode == 1
    assert "docker: unknown command ['biuld', '.']" in done.stderr


def test_a_rule_answers_even_an_unknown_subcommand(fakebin: FakeBin) -> None:
    fakebin.install("kind").on("kind", "frobnicate", stdout="ok\n", exit=3)
    done = _run(fakebin, "kind", "frobnicate")
    assert (done.returncode, done.stdout) == (3, "ok\n")
