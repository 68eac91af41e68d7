"""`spec.command`, parsed once: which launcher it names, torchrun's own flags, and the program it runs.

`render` (the pod's torchrun arguments) and `kubetrain run` (the local agents' arguments and the checks
before start) both read a command through `parse_command`, so the two cannot disagree on what a command
means. torchrun's flags are parsed as torchrun parses them: `--nproc_per_node=1`, `--nproc-per-node 1`,
`-m`, `--no-python`; the first argument that is not a flag is the program.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

PYTHONS = {"python", "python3", "python3.11", "python3.12", "python3.13"}
TRAINER_MODULE = "kubetrain.runtime"
TORCHRUN_MODULES = {"torch.distributed.run"}
# torchrun flags that take no value (normalised names); the others take one.
_SWITCHES = {"--standalone", "--module", "--no-python", "--run-path", "--virtual-local-rank", "--help"}
_SHORT = {"-m": "--module", "-r": "--redirects", "-t": "--tee", "-h": "--help"}
# Flags that choose the kind of program: the program part (`LaunchCommand.program`) writes them itself.
_PROGRAM_FLAGS = {"--module", "--no-python"}


@dataclass(frozen=True)
class Flag:
    """One torchrun flag: its --dash-case name, its value (None for a switch), and the words as written."""

    name: str
    value: str | None
    words: tuple[str, ...]


@dataclass(frozen=True)
class LaunchCommand:
    """What a command runs. kind: "trainer" (no command: kubetrain's Trainer), "module" (`-m target`),
    "script" (a Python file), or "executable" (anything else, run with torchrun --no-python)."""

    launcher: str | None
    flags: tuple[Flag, ...]
    kind: str
    target: str
    args: tuple[str, ...]

    def flag(self, name: str) -> str | None:
        """The value of torchrun flag `name` (--dash-case; the last one wins, as in torchrun), or None."""
        found = [flag for flag in self.flags if flag.name == name]
        return (found[-1].value or "") if found else None

    def program(self, workdir: str | None = None) -> list[str]:
        """torchrun's arguments for the program itself. A relative script becomes absolute under `workdir`
        (the code mount), since a TrainJob cannot set the container's working directory."""
        if self.kind in ("module", "trainer"):
            return ["-m", self.target, *self.args]
        if self.kind == "executable":
            return ["--no-python", self.target, *self.args]
        script = self.target
        if workdir and not script.startswith("/"):
            script = posixpath.join(workdir, script)
        return [script, *self.args]

    def torchrun_args(self, workdir: str | None = None, drop: frozenset[str] = frozenset()) -> list[str]:
        """The command's own torchrun flags (as written, less those named in `drop`), then the program."""
        kept = [word for flag in self.flags if flag.name not in drop | _PROGRAM_FLAGS for word in flag.words]
        return [*kept, *self.program(workdir)]


def launcher(command: list[str] | None) -> tuple[str, list[str]] | None:
    """(launcher name, its arguments) when `command` starts with a known launcher, else None."""
    if not command:
        return None
    program, rest = posixpath.basename(command[0]), command[1:]
    if program == "torchrun":
        return "torchrun", rest
    if program in {"accelerate", "deepspeed"}:
        return program, rest
    if program in PYTHONS and len(rest) >= 2 and rest[0] == "-m":
        module = rest[1]
        if module in TORCHRUN_MODULES:
            return "torchrun", rest[2:]
        if module == "torch.distributed.launch" or module.startswith(("accelerate.", "deepspeed.")):
            return module.split(".")[0] if not module.startswith("torch.") else module, rest[2:]
    return None


def parse_command(command: list[str] | None, args: list[str] | None = None) -> LaunchCommand:
    """Parse `spec.command` (plus `spec.args`, appended to the program's arguments)."""
    extra = tuple(args or ())
    if not command:
        return LaunchCommand(None, (), "trainer", TRAINER_MODULE, extra)
    found = launcher(command)
    if found and found[0] == "torchrun":
        flags, rest = parse_flags(found[1])
        names = {flag.name for flag in flags}
        if not rest:
            return LaunchCommand("torchrun", flags, "executable", "", extra)
        kind = "module" if "--module" in names else "executable" if "--no-python" in names else "script"
        return LaunchCommand("torchrun", flags, kind, rest[0], (*rest[1:], *extra))
    program, *rest = command
    if posixpath.basename(program) in PYTHONS and rest:
        if rest[0] == "-m" and len(rest) > 1:
            return LaunchCommand(found[0] if found else None, (), "module", rest[1], (*rest[2:], *extra))
        if not rest[0].startswith("-"):
            return LaunchCommand(None, (), "script", rest[0], (*rest[1:], *extra))
    return LaunchCommand(found[0] if found else None, (), "executable", program, (*rest, *extra))


def torchrun_in(words: list[str]) -> LaunchCommand | None:
    """The torchrun that a container's command + args start, parsed, or None. The launcher need not come
    first: kubetrain's own pods run `sh -c WRAPPER torchrun ARGS...`, where "torchrun" is the shell's $0."""
    for start in range(len(words)):
        found = launcher(words[start:])
        if found and found[0] == "torchrun":
            return parse_command(words[start:])
    return None


def parse_flags(words: list[str]) -> tuple[tuple[Flag, ...], list[str]]:
    """torchrun's own flags (up to the first word that is not one) and the rest."""
    flags: list[Flag] = []
    index = 0
    while index < len(words) and words[index].startswith("-") and words[index] != "--":
        word = words[index]
        raw, sep, value = word.partition("=")
        name = _SHORT.get(raw) or "--" + raw.lstrip("-").replace("_", "-")
        taken: tuple[str, ...] = (word,)
        if not sep and name not in _SWITCHES and index + 1 < len(words):
            index += 1
            value = words[index]
            taken = (word, value)
        flags.append(Flag(name, value if (sep or len(taken) == 2) else None, taken))
        index += 1
    if index < len(words) and words[index] == "--":
        index += 1
    return tuple(flags), words[index:]


def nproc_flag(command: list[str] | None) -> str | None:
    """The --nproc-per-node value of a torchrun command, or None."""
    parsed = parse_command(command)
    return parsed.flag("--nproc-per-node") if parsed.launcher == "torchrun" else None


def no_program_python(command: list[str] | None, args: list[str] | None = None) -> str | None:
    """The interpreter's name when the command is a python given only options (no script, -m or -c): it would
    read an empty stdin and exit 0. None otherwise."""
    if not command or posixpath.basename(command[0]) not in PYTHONS:
        return None
    words = [*command[1:], *(args or [])]
    if any(not word.startswith("-") or word[:2] in ("-m", "-c") for word in words):
        return None
    return command[0]
