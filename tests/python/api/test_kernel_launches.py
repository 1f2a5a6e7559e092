"""Every kernel launch in src/gpu reports its own error: it sits inside the scope of a
gpurt::LaunchCheck (gpu/resources.h), declared before it and checked after it in the same block
(dev::launchKernel, gpu/device/launch.cuh, is one such launch, used by the launch sites). A bare
cudaGetLastError() after a launch would clear an unrelated pending error and report it as the
launch's; a launch with no check at all would leave its error to the next caller."""
import os
import re

import harness

GPU_SRC = os.path.join(harness.ROOT, "src", "gpu")
EXTS = (".cu", ".cuh", ".cc", ".h")

# Comments and literals, blanked (same length, newlines kept) before scanning.
_NOISE = re.compile(r'"(?:\\.|[^"\\\n])*"|//[^\n]*|/\*[\s\S]*?\*/')
_LAUNCH = re.compile(r"<<<|\b(?:cuda|hip)Launch(?:Cooperative)?Kernel\w*\s*\(")
_GUARD = re.compile(r"\bLaunchCheck\s+(\w+)\b")
_HELPER_CALL = re.compile(r"\bdev::launchKernel\s*\(")  # launches inside launch.cuh's check


def _blank(m):
    return re.sub(r"[^\n]", " ", m.group(0))


def _enclosing_block(text, pos):
    """(open, close) offsets of the innermost {...} block around pos, or None."""
    depth, i = 0, pos
    while i > 0:
        i -= 1
        if text[i] == "}":
            depth += 1
        elif text[i] == "{":
            if depth == 0:
                break
            depth -= 1
    else:
        return None
    open_, depth = i, 0
    for j in range(open_, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return open_, j
    return None


def _covered(text, pos):
    for g in _GUARD.finditer(text, 0, pos):
        block = _enclosing_block(text, g.start())
        if not block or not block[0] < pos < block[1]:
            continue
        check = re.compile(r"\b%s\s*\.\s*check\s*\(" % re.escape(g.group(1)))
        if check.search(text, pos, block[1]):
            return True
    return False


def unchecked_launches(root=GPU_SRC):
    """(launch sites found: launches and dev::launchKernel calls, ["path:line: text" of each
    launch outside a LaunchCheck's scope])."""
    found, bad = 0, []
    for d, _, files in os.walk(root):
        for f in sorted(files):
            if not f.endswith(EXTS):
                continue
            path = os.path.join(d, f)
            with open(path) as fh:
                raw = fh.read()
            text = _NOISE.sub(_blank, raw)
            lines = raw.splitlines()
            found += len(_HELPER_CALL.findall(text))
            for m in _LAUNCH.finditer(text):
                found += 1
                if not _covered(text, m.start()):
                    line = text.count("\n", 0, m.start()) + 1
                    bad.append(f"{os.path.relpath(path, harness.ROOT)}:{line}: "
                               f"{lines[line - 1].strip()}")
    return found, bad


def test_every_gpu_launch_is_checked_by_launch_check():
    found, bad = unchecked_launches()
    assert found >= 15, f"the scan found only {found} kernel launch sites in src/gpu"
    assert not bad, "kernel launches outside a gpurt::LaunchCheck:\n" + "\n".join(bad)


def test_scan_tells_a_checked_launch_from_a_bare_one(tmp_path):
    (tmp_path / "k.cu").write_text(
        "void good(cudaStream_t s) {\n"
        "  const gpurt::LaunchCheck launched;\n"
        "  if (x) { k<<<1, 32, 0, s>>>(); }\n"
        "  launched.check(\"k\");\n"
        "}\n"
        "void bad(cudaStream_t s) {\n"
        "  k<<<1, 32, 0, s>>>();  // a comment: LaunchCheck c; c.check(\n"
        "  CCLX_CUDA_CHECK(cudaGetLastError());\n"
        "}\n"
        "void late(cudaStream_t s) {\n"
        "  k<<<1, 32, 0, s>>>();\n"
        "  const gpurt::LaunchCheck launched;\n"
        "  launched.check(\"k\");\n"
        "}\n"
        "void launchApi(cudaStream_t s) { cudaLaunchKernelExC(&cfg, f, args); }\n"
        "void helper(void* s) { dev::launchKernel(\"k\", k, 1, 32, s); }\n")
    found, bad = unchecked_launches(str(tmp_path))
    assert found == 5
    assert [b.split(":")[1] for b in bad] == ["7", "11", "15"], bad
