"""Prints, one per line, the Python packages that scripts/setup_env.sh installs into the project's
virtual environment, all read from pyproject.toml: the build requirements ([build-system]
requires: nanobind, scikit-build-core), the run-time dependencies ([project] dependencies) and
the optional-dependency extras named on the command line ("all" names every extra).

    python3 scripts/pyproject_reqs.py all           # everything the tests can use
    python3 scripts/pyproject_reqs.py plot torch    # the main job's share
    python3 scripts/pyproject_reqs.py --extras      # the names of the extras

An unknown extra is an error (exit status 2) naming the extras that exist. Runs with the standard
library only: tomllib (Python >= 3.11), else tomli, else a reader for the plain arrays of strings
that pyproject.toml uses for these tables."""
from __future__ import annotations

import ast
import os
import re
import sys
from typing import Dict, List

PYPROJECT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                         "pyproject.toml")


def _plain_read(text: str) -> dict:
    """The tables and `key = [ "..." , ... ]` / `key = "..."` entries of a simple TOML file
    (arrays may span lines); anything else is skipped."""
    data: dict = {}
    table: dict = data
    lines = iter(text.splitlines())
    for line in lines:
        s = line.split("#", 1)[0].strip() if not line.strip().startswith("#") else ""
        if not s:
            continue
        m = re.fullmatch(r"\[([^\[\]]+)\]", s)
        if m:
            table = data
            for part in re.findall(r'"[^"]*"|[^.\s]+', m.group(1)):
                table = table.setdefault(part.strip('"'), {})
            continue
        m = re.fullmatch(r'("[^"]*"|[\w.-]+)\s*=\s*(.*)', s)
        if not m:
            continue
        key, value = m.group(1).strip('"'), m.group(2)
        if value.startswith("["):
            while value.count("[") > value.count("]"):
                value += " " + next(lines).split("#", 1)[0]
        try:
            table[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            pass  # a value this reader does not need
    return data


def load(path: str = PYPROJECT) -> dict:
    with open(path, "rb") as f:
        raw = f.read()
    try:
        import tomllib  # type: ignore[import-not-found]
    except ImportError:
        try:
            import tomli as tomllib  # type: ignore[import-not-found,no-redef]
        except ImportError:
            return _plain_read(raw.decode("utf-8"))
    return tomllib.loads(raw.decode("utf-8"))


def extras(data: dict) -> Dict[str, List[str]]:
    return dict(data.get("project", {}).get("optional-dependencies", {}))


def requirements(data: dict, names: List[str]) -> List[str]:
    """Build requirements, dependencies, then each named extra; each package once, in order."""
    ex = extras(data)
    if "all" in names:
        names = list(ex)
    unknown = [n for n in names if n not in ex]
    if unknown:
        raise KeyError(f"unknown extra(s) {', '.join(unknown)} (pyproject.toml has: "
                       f"{', '.join(ex)}, or all)")
    out: List[str] = []
    for req in (data.get("build-system", {}).get("requires", []) +
                data.get("project", {}).get("dependencies", []) +
                [r for n in names for r in ex[n]]):
        if req not in out:
            out.append(req)
    return out


def main(argv: List[str]) -> int:
    data = load()
    if argv == ["--extras"]:
        print("\n".join(extras(data)))
        return 0
    try:
        print("\n".join(requirements(data, argv)))
    except KeyError as e:
        print(f"pyproject_reqs.py: {e.args[0]}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
