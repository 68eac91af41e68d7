"""Print the site-packages entries of torch and its dependencies (not triton), one a line.

prepare-node.sh copies these from the test virtualenv into the base image, so torch is downloaded once
per machine (by `make install`). Run with the virtualenv's python.
"""

from __future__ import annotations

import importlib.metadata as md
import re

SKIP = {"triton"}  # GPU-only (torch.compile); torch imports without it


def closure(name: str) -> set[str]:
    seen: set[str] = set()
    todo = [name]
    while todo:
        dist = md.distribution(todo.pop())
        key = dist.metadata["Name"].lower().replace("_", "-")
        if key in seen or key in SKIP:
            continue
        seen.add(key)
        for req in dist.requires or []:
            if "extra ==" in req:
                continue
            todo.append(re.split(r"[ ;<>=!~\[(]", req, maxsplit=1)[0])
    return seen


def entries(names: set[str]) -> list[str]:
    out: set[str] = set()
    for name in names:
        for file in md.distribution(name).files or []:
            top = file.parts[0]
            if top not in ("..", "__pycache__") and not top.endswith(".pth"):
                out.add(top)
    return sorted(out)


if __name__ == "__main__":
    print("\n".join(entries(closure("torch"))))
