"""The tree keeps the shape docs/DESIGN.md ("Layering rules") describes: no import circle in
python/cclx; no include upward across the C++ layers (base <- store <- core <- the backends);
core includes no backend; no backend (src/host, src/gpu, src/nogpu) includes another; the front
ends (python/src, src/capi, src/torchcomms, src/nccl_dropin) include only the public headers
(include/cclx) and their own folder's, but for the exceptions listed below with their reason; and
no folder of the tree (src, python, tests, bench, include, examples, scripts, tools) with more
than 16 source files directly."""
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


def _includes(folder):
    """(path relative to the root, line number, the quoted include) of every file below `folder`."""
    out = []
    for d, _, files in os.walk(os.path.join(harness.ROOT, folder)):
        for f in files:
            if not f.endswith(SOURCE):
                continue
            path = os.path.join(d, f)
            with open(path) as fh:
                for i, line in enumerate(fh, 1):
                    m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
                    if m:
                        out.append((os.path.relpath(path, harness.ROOT), i, m.group(1)))
    return out


BACKENDS = ("host", "gpu", "nogpu")
FRONT_ENDS = ("capi", "torchcomms", "nccl_dropin")


def test_core_includes_no_backend_or_front_end():
    bad = [f"{p}:{i}: {inc}" for p, i, inc in _includes("src/core")
           if inc.split("/")[0] in BACKENDS + FRONT_ENDS]
    assert not bad, "core includes a backend or a front end:\n" + "\n".join(bad)


def test_no_backend_includes_another_or_a_front_end():
    bad = []
    for wing in BACKENDS:
        for p, i, inc in _includes("src/" + wing):
            top = inc.split("/")[0]
            if (top in BACKENDS and top != wing) or top in FRONT_ENDS:
                bad.append(f"{p}:{i}: {inc}")
    assert not bad, "a backend includes another backend or a front end:\n" + "\n".join(bad)


# Front-end files that still include the library's own headers, what they include and why.
# Nothing else of a front end may include anything but include/cclx and its own folder.
FRONT_END_EXCEPTIONS = {
    # Rendezvous from the environment, to become one public function.
    "python/src/rendezvous.cc": {"core/comm/comm_internal.h", "core/settings/config.h",
                                 "base/log.h", "store/bootstrap.h"},
    "src/torchcomms/convert.cc": {"core/settings/config.h"},
}
# The NCCL drop-in builds the GPU backend over the application's NCCL comm (its setup, the
# exchange through that comm, the shared-GPU mode's comms, the NCCL ABI): these headers, in any
# of its files. Its collectives go through Backend::run, the door a cclx comm's calls take.
DROPIN_INTERNALS = {
    "base/error.h", "base/log.h", "core/comm/backend.h", "core/elements/dtype_math.h",
    "core/failure/setup_sequence.h", "core/failure/watchdog.h", "core/settings/config.h",
    "core/settings/table.h", "gpu/backend.h", "gpu/nccl/api.h", "gpu/peer_mem.h",
    "gpu/resources.h", "gpu/runtime.h", "store/auth.h", "store/bootstrap.h",
}


def test_front_ends_use_only_public_headers():
    bad = []
    for folder, own in (("python/src", None), ("src/capi", "capi"),
                        ("src/torchcomms", "torchcomms"), ("src/nccl_dropin", "nccl_dropin")):
        for p, i, inc in _includes(folder):
            if "/" not in inc or inc.split("/")[0] == own:
                continue  # its own folder's
            if inc in FRONT_END_EXCEPTIONS.get(p, ()):
                continue
            if own == "nccl_dropin" and inc in DROPIN_INTERNALS:
                continue
            bad.append(f"{p}:{i}: {inc}")
    assert not bad, ("a front end includes the library's internals (use include/cclx, or list "
                     "the exception with its reason):\n" + "\n".join(bad))

