"""The console entry point. Answers `kubetrain --help` and `--version` without importing click (start-up
time is most of what a help call costs); everything else goes to the click application."""

from __future__ import annotations

import os
import sys

# No `typing` import here: it costs more than the rest of `kubetrain --help` (it pulls in re and collections).


def main() -> int | None:
    tune_gc()
    args = sys.argv[1:]
    # the verb's work loads when it runs: `kubetrain --help` and the other verbs stay fast (import budget)
    from kubetrain.cli.commands import FAST_HELP_MIN_WIDTH, fast_help

    if len(args) == 1 and args[0] in {"-h", "--help", "--version"} and _terminal_width() >= FAST_HELP_MIN_WIDTH:
        if args[0] == "--version":
            # the verb's work loads when it runs: `kubetrain --help` and the other verbs stay fast (import budget)
            from kubetrain import __version__

            return _write(f"kubetrain, version {__version__}\n")
        return _write(fast_help())
    without_pydantic_plugins()
    # the verb's work loads when it runs: `kubetrain --help` and the other verbs stay fast (import budget)
    from kubetrain.cli.main import main as click_main

    try:
        code: int | None = click_main()
    finally:
        exit_without_rescans()
    return code


def _write(text: str) -> int:
    """Print, and turn a failed write into one line (as kubetrain.cli.output does for the commands)."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        return 0  # the reader left, as `kubetrain --help | head` does
    except OSError as exc:
        sys.stderr.write(f"error: cannot write to stdout: {exc.strerror or exc}\n")
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)  # the interpreter's flush at exit would fail again
        return 1
    return 0


def tune_gc() -> None:
    """CPython's cyclic GC runs every 700 net allocations and then scans every young object: importing and
    building the spec models (~100,000 objects, none of them garbage) cost ~97 collections and ~22 ms of a
    render. Collect every 200,000 instead, as mypy does (mypy/gc_tuning.py); cycles are still collected."""
    import gc  # the verb's work loads when it runs: `kubetrain --help` and the other verbs stay fast (import budget)

    gc.set_threshold(200_000, 30, 30)


def exit_without_rescans() -> None:
    """At exit CPython's cyclic GC scans every object that is still alive, several times, while it tears the
    modules down: 20-40 ms of a 250 ms `kubetrain status`. Freezing them (gc.freeze, moved to the permanent
    generation) leaves only the reference counting. Objects are still deallocated, files flushed and closed,
    atexit handlers run; only garbage cycles left at exit keep their finalizers uncalled, which CPython does
    not promise to call at exit anyway."""
    import gc  # the verb's work loads when it runs: `kubetrain --help` and the other verbs stay fast (import budget)

    gc.freeze()


def without_pydantic_plugins() -> None:
    """pydantic looks up plugins through package entry points (importlib.metadata, ~20 ms) the first time a
    model is built; the CLI uses none. Only the CLI process sets this, never the library."""
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")


def _terminal_width() -> int:
    """The width click would use (shutil.get_terminal_size's rules, without importing shutil)."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns > 0:
        return columns
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns if sys.__stdout__ else 80
    except (OSError, ValueError, AttributeError):
        return 80
