"""`.dockerignore` semantics: Docker's own pattern test table, its file reader, and real directory walks."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubetrain.errors import BuildError
from kubetrain.imagebuild.context import collect
from kubetrain.imagebuild.dockerignore import PatternMatcher, go_clean, parse_ignore_lines
from kubetrain.imagebuild.selection import select

# (pattern, path, excluded) — from moby/patternmatcher's TestMatches, paths without a trailing slash.
DOCKER_CASES = [
    ("**", "file", True), ("**", "dir/file", True), ("**/", "dir/file", True), ("**/**", "dir/file", True),
    ("dir/**", "dir/file", True), ("dir/**", "dir/dir2/file", True), ("**/dir", "dir", True),
    ("**/dir", "dir/file", True), ("**/dir2/*", "dir/dir2/file", True),
    ("**/dir2/**", "dir/dir2/dir3/file", True),
    ("**file", "file", True), ("**file", "dir/file", True), ("**/file", "dir/file", True),
    ("**file", "dir/dir/file", True), ("**/file", "dir/dir/file", True), ("**/file*", "dir/dir/file", True),
    ("**/file*", "dir/dir/file.txt", True), ("**/file*txt", "dir/dir/file.txt", True),
    ("**/file*.txt", "dir/dir/file.txt", True), ("**/file*.txt*", "dir/dir/file.txt", True),
    ("**/**/*.txt", "dir/dir/file.txt", True), ("**/**/*.txt2", "dir/dir/file.txt", False),
    ("**/*.txt", "file.txt", True), ("**/**/*.txt", "file.txt", True), ("a**/*.txt", "a/file.txt", True),
    ("a**/*.txt", "a/dir/file.txt", True), ("a**/*.txt", "a/dir/dir/file.txt", True),
    ("a/*.txt", "a/dir/file.txt", False), ("a/*.txt", "a/file.txt", True), ("a/*.txt**", "a/file.txt", True),
    ("a[b-d]e", "ae", False), ("a[b-d]e", "ace", True), ("a[b-d]e", "aae", False), ("a[^b-d]e", "aze", True),
    (".*", ".foo", True), (".*", "foo", False), ("abc.def", "abcdef", False), ("abc.def", "abc.def", True),
    ("abc.def", "abcZdef", False), ("abc?def", "abcZdef", True), ("abc?def", "abcdef", False),
    ("a\\\\", "a\\", True), ("**/foo/bar", "foo/bar", True), ("**/foo/bar", "dir/foo/bar", True),
    ("**/foo/bar", "dir/dir2/foo/bar", True), ("abc/**", "abc", False), ("abc/**", "abc/def", True),
    ("abc/**", "abc/def/ghi", True), ("**/.foo", ".foo", True), ("**/.foo", "bar.foo", False),
    ("a(b)c/def", "a(b)c/def", True), ("a(b)c/def", "a(b)c/xyz", False), ("a.|)$(}+{bc", "a.|)$(}+{bc", True),
    ("dist/*.whl", "dist/proxy.py-2.4.0rc3.dev36+g08acad9-py3-none-any.whl", True),
    # Not gitignore: patterns are anchored at the context root, '*' does not cross '/'.
    ("foo", "sub/foo", False), ("*.pyc", "pkg/mod.pyc", False), ("*/*.pyc", "pkg/mod.pyc", True),
]


@pytest.mark.parametrize(("pattern", "path", "excluded"), DOCKER_CASES)
def test_docker_pattern_table(pattern: str, path: str, excluded: bool) -> None:
    assert PatternMatcher(parse_ignore_lines(pattern)).excluded(path) is excluded


def test_last_matching_pattern_wins_and_exceptions_reinclude() -> None:
    matcher = PatternMatcher(["*.md", "!README.md", "README-secret.md"])
    assert matcher.excluded("CHANGES.md")
    assert not matcher.excluded("README.md")
    assert matcher.excluded("README-secret.md")
    later = PatternMatcher(["!README.md", "*.md"])  # the exception comes first, so it loses
    assert later.excluded("README.md")


def test_directory_pattern_excludes_children_unless_reincluded() -> None:
    matcher = PatternMatcher(["data", "!data/keep.txt"])
    assert matcher.excluded("data/big.bin")
    assert matcher.excluded("data/sub/x")
    assert not matcher.excluded("data/keep.txt")


def test_reader_comments_blank_lines_slashes_and_bom() -> None:
    text = "\ufeff# comment\n\n  /build/  \n!/build/keep\n ./docs//x/../y \n  # not a comment\n"
    assert parse_ignore_lines(text) == ["build", "!build/keep", "docs/y", "# not a comment"]


@pytest.mark.parametrize(("raw", "clean"), [("a//b/", "a/b"), ("./a", "a"), ("a/../..", ".."),
                                            ("/../a", "/a"),
                                            ("//a", "/a"), ("", "."), ("a/./b/..", "a")])
def test_go_clean(raw: str, clean: str) -> None:
    assert go_clean(raw) == clean


def test_bad_patterns_are_one_line_errors() -> None:
    with pytest.raises(BuildError, match=r"ctx/.dockerignore: illegal exclusion pattern '!'"):
        PatternMatcher(["!"], "ctx/.dockerignore")
    with pytest.raises(BuildError, match=r"invalid pattern 'a\['"):
        PatternMatcher(["a["])


def _tree(root: Path, files: list[str]) -> None:
    for name in files:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(name)


def test_walk_with_real_files(tmp_path: Path) -> None:
    _tree(tmp_path, ["train.py", "README.md", "notes.md", "data/big.bin", "data/keep.txt", "pkg/mod.py",
                     "pkg/__pycache__/mod.cpython-311.pyc", "logs/run1/out.log", ".kubetrain/volumes/x"])
    (tmp_path / "empty").mkdir()
    (tmp_path / ".dockerignore").write_text("*.md\n!README.md\ndata\n!data/keep.txt\n**/__pycache__\nlogs\n")
    entries = select(tmp_path).entries
    assert [(e.path, e.kind) for e in entries] == [
        (".dockerignore", "file"), ("README.md", "file"), ("data/keep.txt", "file"), ("empty", "dir"),
        ("pkg/mod.py", "file"), ("train.py", "file")]


def test_excluded_dir_is_not_walked_without_a_matching_exception(tmp_path: Path) -> None:
    # Docker skips an excluded directory unless an exception pattern starts with it: '!**/keep' does not.
    _tree(tmp_path, ["cache/keep", "src/keep"])
    entries = collect(tmp_path, PatternMatcher(["cache", "!**/keep"]))
    assert [e.path for e in entries] == ["src/keep"]


def test_symlinks_are_entries_not_followed(tmp_path: Path) -> None:
    _tree(tmp_path, ["real/file"])
    (tmp_path / "link").symlink_to("real")
    entries = collect(tmp_path, PatternMatcher([]))
    assert [(e.path, e.kind) for e in entries] == [("link", "link"), ("real/file", "file")]


def test_dockerfile_specific_ignore_file_wins(tmp_path: Path) -> None:
    _tree(tmp_path, ["a.txt", "b.txt"])
    (tmp_path / ".dockerignore").write_text("a.txt\n")
    (tmp_path / "train.Dockerfile").write_text("FROM scratch\n")
    (tmp_path / "train.Dockerfile.dockerignore").write_text("b.txt\n")
    kept = [e.path for e in select(tmp_path, tmp_path / "train.Dockerfile").entries]
    assert "a.txt" in kept and "b.txt" not in kept
    assert "b.txt" in [e.path for e in select(tmp_path).entries]  # kubetrain's Dockerfile: .dockerignore


def test_kubetrains_defaults_apply_beside_an_ignore_file(tmp_path: Path) -> None:
    """One rule: a .dockerignore adds to kubetrain's defaults (it used to replace them, and a .dockerignore
    of one line let .git and checkpoints/ into the image)."""
    _tree(tmp_path, [".git/config", "checkpoints/step-1.pt", "train.py"])
    (tmp_path / ".dockerignore").write_text("# nothing\n")
    assert [e.path for e in select(tmp_path).entries] == [".dockerignore", "train.py"]
    (tmp_path / ".dockerignore").write_text("!checkpoints\n")  # a re-inclusion still wins
    assert [e.path for e in select(tmp_path).entries] == [".dockerignore", "checkpoints/step-1.pt", "train.py"]
