"""The tree keeps its shape: no import circle in python/cclx, no include upward across the C++
layers (base <- store <- core), and no folder of the tree (src, python, tests, bench, include,
examples, scripts, tools) with more than 16 source files directly."""
import ast
import os
import re

import harness

PY_ROOT = os.path.join(harness.ROOT, "python")
SOURCE = (".py", ".cc", ".h", ".cu", ".cuh", ".hpp", ".c", ".cpp", ".sh")


def _cclx_modules():
    mods = {}
    for d, _, files in os.walk(os.path.join(PY_ROOT, "cclx")):
        for f in files:
            if f.endswith(".py"):
                rel = os.path.relpath(os.path.join(d, f), PY_ROOT)[:-3].replace(os.sep, ".")
                pkg = rel.endswith(".__init__")
                mods[rel[:-len(".__init__")] if pkg else rel] = (os.path.join(d, f), pkg)
    return mods


def _imports(mods):
    """Module -> the cclx modules it imports (at the top or inside functions)."""
    edges = {}
    for m, (path, pkg) in mods.items():
        base = m if pkg else m.rpartition(".")[0]
        out = set()
        with open(path) as f:
            tree = ast.parse(f.read())
        for n in ast.walk(tree):
            if isinstance(n, ast.Import):
                out.update(a.name for a in n.names if a.name in mods)
            elif isinstance(n, ast.ImportFrom):
                mod = n.module or ""
                if n.level:
                    b = base
                    for _ in range(n.level - 1):
                        b = b.rpartition(".")[0]
                    mod = b + ("." + mod if mod else "")
                subs = [mod + "." + a.name for a in n.names]
                out.update(s for s in subs if s in mods)
                # Names that are not modules come from `mod` itself (_C is the extension).
                if mod in mods and any(s not in mods and not s.endswith("._C") for s in subs):
                    out.add(mod)
        out.discard(m)
        edges[m] = out
    return edges


def test_no_import_circle_in_cclx():
    edges = _imports(_cclx_modules())
    assert "cclx.comm" in edges and edges["cclx.comm"], "the scan found no imports"

    def path_back(start):  # a path start -> ... -> start, or None
        stack, seen = [(start, [start])], set()
        while stack:
            v, path = stack.pop()
            for w in edges[v]:
                if w == start:
                    return path + [w]
                if w not in seen:
                    seen.add(w)
                    stack.append((w, path + [w]))
        return None

    circles = [p for p in (path_back(m) for m in sorted(edges)) if p]
    assert not circles, "import circle(s): " + "; ".join(" -> ".join(p) for p in circles)


def test_no_include_upward_across_base_store_core():
    layers = {"base": 0, "store": 1, "core": 2}
    bad = []
    for layer, rank in layers.items():
        for d, _, files in os.walk(os.path.join(harness.ROOT, "src", layer)):
            for f in files:
                path = os.path.join(d, f)
                with open(path) as fh:
                    for i, line in enumerate(fh, 1):
                        m = re.match(r'\s*#\s*include\s+"([a-z_]+)/', line)
                        if m and layers.get(m.group(1), 99) > rank:
                            bad.append(f"{os.path.relpath(path, harness.ROOT)}:{i}: {line.strip()}")
    assert not bad, "includes upward:\n" + "\n".join(bad)


def test_folders_hold_at_most_16_source_files():
    crowded = []
    for top in ("src", "python", "tests", "bench", "include", "examples", "scripts", "tools"):
        for d, dirs, files in os.walk(os.path.join(harness.ROOT, top)):
            dirs[:] = [x for x in dirs if x != "__pycache__"]
            n = sum(f.endswith(SOURCE) for f in files)
            if n > 16:
                crowded.append(f"{os.path.relpath(d, harness.ROOT)}: {n}")
    assert not crowded, "folders with more than 16 source files: " + ", ".join(crowded)
