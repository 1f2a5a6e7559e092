#!/usr/bin/env python3
"""Compares the machine code (SASS) of the kernels in two sets of CUDA objects or libraries.

    scripts/sass_compare.py BEFORE... -- AFTER...

Each side is a list of files `cuobjdump -sass` accepts (.o, .so, .cubin, executables). Every
function's SASS is normalized (addresses, encodings and comments removed; symbol names, which
change when code moves between files or namespaces, replaced by a placeholder) and the two sides
are compared as multisets of bodies: names and order do not matter, instructions do. Exit status
0 when both sides hold the same bodies; otherwise it prints which functions have no twin.
"""
from __future__ import annotations

import collections
import os
import re
import shutil
import subprocess
import sys
from typing import Dict, List, Tuple



def _cuobjdump() -> str:
    """cuobjdump from $CUOBJDUMP, PATH, the CUDA toolkit, or the copy triton's wheel carries."""
    for c in (os.environ.get("CUOBJDUMP"), shutil.which("cuobjdump"), "/usr/local/cuda/bin/cuobjdump"):
        if c and os.path.exists(c):
            return c
    try:
        import triton  # type: ignore[import-not-found]

        c = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
        if os.path.exists(c):
            return c
    except ImportError:
        pass
    sys.exit("cuobjdump not found: set CUOBJDUMP")


_FUNC = re.compile(r"^\s*Function\s*:\s*(\S+)")
_INSN = re.compile(r"/\*[0-9a-f]{4,}\*/\s*(.*?)\s*;?\s*(?:/\*.*)?$")
_SYM = re.compile(r"`\(([^)]*)\)")


def functions(path: str) -> List[Tuple[str, str]]:
    out = subprocess.run([_cuobjdump(), "-sass", path], check=True, capture_output=True,
                         text=True).stdout
    funcs: List[Tuple[str, str]] = []
    name, body = None, []
    for line in out.splitlines():
        m = _FUNC.match(line)
        if m:
            if name is not None:
                funcs.append((name, "\n".join(body)))
            name, body = m.group(1), []
            continue
        if name is None:
            continue
        m = _INSN.search(line)
        if m and m.group(1):
            body.append(_SYM.sub("`(SYM)", m.group(1)))
    if name is not None:
        funcs.append((name, "\n".join(body)))
    return funcs


def collect(paths: List[str]) -> Dict[str, List[str]]:
    bodies: Dict[str, List[str]] = collections.defaultdict(list)
    for p in paths:
        for name, body in functions(p):
            bodies[body].append(name)
    return bodies


def main(argv: List[str]) -> int:
    if "--" not in argv:
        print(__doc__)
        return 2
    i = argv.index("--")
    before, after = collect(argv[:i]), collect(argv[i + 1:])
    nb = sum(len(v) for v in before.values())
    na = sum(len(v) for v in after.values())
    missing = []
    for body, names in before.items():
        extra = len(names) - len(after.get(body, []))
        if extra > 0:
            missing += [("before only", n) for n in names[:extra]]
    for body, names in after.items():
        extra = len(names) - len(before.get(body, []))
        if extra > 0:
            missing += [("after only", n) for n in names[:extra]]
    print(f"functions: {nb} before, {na} after; {len(missing)} without an identical twin")
    for side, name in sorted(missing):
        print(f"  {side}: {name}")
    return 0 if not missing else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
