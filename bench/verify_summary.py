"""Summarizes test runs: GoogleTest JSON reports (--gtest_output=json) and pytest JUnit XML
(--junitxml), one per step, into one JSON record with a verdict per case and world size, and
prints the closing line `<tag>: N passed, N failed, N skipped`.

A step that crashed or was stopped writes no report (GoogleTest and pytest write theirs at the
end): its cases then come from its log (GoogleTest's `[ RUN ]` / `[ OK ]` lines, pytest -v's
`PASSED` / `FAILED` lines), and every case in the step's list of expected cases that neither the
report nor the log names counts as errored, with the reason (the step crashed, timed out or never
started). A step that exits non-zero with no failed case gets one errored entry of its own.
Errored cases count as failed in the closing line.

Used by scripts/gpu_verify.py (which writes the manifest) and scripts/gpu_sanitize.sh.

    python3 bench/verify_summary.py MANIFEST.json OUT.json [--tag gpu_verify]
    python3 bench/verify_summary.py --gtest-dir DIR      # every *.json report of a folder

The manifest: {"meta": {...copied into the record...}, "steps": [step, ...]}, each step a dict:
  id, kind ("gtest" | "pytest"), name, world_size (int or null), state ("ran" | "not_started" |
  "missing"), reason (why not run), rc, timed_out, seconds, report (path), log (path),
  expected (case names: "Suite.Case" for GoogleTest, pytest node ids), and for sanitizer steps
  sanitizer_errors (an int, counted as one failed entry when non-zero; NCCL's own reports are
  kept apart in sanitizer_nccl_reports, see sanitizer_reports()).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import xml.etree.ElementTree as ET
from typing import Dict, List, Optional, Tuple

PASSED, FAILED, SKIPPED, ERRORED = "passed", "failed", "skipped", "errored"

_GT_LINE = re.compile(r"^\[ +(RUN|OK|FAILED|SKIPPED) +\] (\S+)(?: \((\d+) ms\))?")
_PY_LINE = re.compile(r"^(\S+::\S+) (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)\b")


def _read(path: Optional[str]) -> str:
    if not path or not os.path.isfile(path):
        return ""
    with open(path, errors="replace") as f:
        return f.read()


def _secs(v) -> float:
    try:
        return float(str(v).rstrip("s"))
    except (TypeError, ValueError):
        return 0.0


# ---- GoogleTest -----------------------------------------------------------------------------

_SAN_TOP = re.compile(r"^========= (?! )(?!(?:ERROR|RACECHECK|LEAK) SUMMARY|COMPUTE-SANITIZER)"
                      r"(\S.*)$", re.M)


def sanitizer_reports(text: str) -> Dict[str, int]:
    """compute-sanitizer's reports in a log, by origin: {"ours": n, "nccl": n}. A report is a
    top-level `========= ` line and its indented lines; it is NCCL's when the first host frame of
    its backtrace lies in libnccl (NCCL's own probes, e.g. cudaFuncGetAttributes on kernels built
    for other GPUs in ncclInitKernelsForDevice, which NCCL expects to fail). Reports the ERROR
    SUMMARY lines count beyond those printed are ours."""
    starts = [m.start() for m in _SAN_TOP.finditer(text)]
    ours = nccl = 0
    for i, a in enumerate(starts):
        block = text[a:starts[i + 1] if i + 1 < len(starts) else len(text)]
        frame = re.search(r"Host Frame:.*", block)
        if frame and "libnccl.so" in frame.group(0):
            nccl += 1
        else:
            ours += 1
    # Beyond --print-limit the summaries count reports that were not printed: those are ours
    # unless shown otherwise.
    total = sum(int(x) for x in re.findall(r"ERROR SUMMARY: (\d+) errors?[ \t]*$", text, re.M))
    return {"ours": max(ours, total - nccl), "nccl": nccl}


def gtest_list(text: str) -> List[str]:
    """Case names ("Suite.Case") from the output of --gtest_list_tests."""
    names, suite = [], None
    for line in text.splitlines():
        line = line.split("#", 1)[0].rstrip()
        if not line or line.startswith("Running main()"):
            continue
        if not line.startswith(" "):
            suite = line.strip()
        elif suite:
            names.append(suite + line.strip())
    return names


def gtest_report(path: str) -> Optional[Dict[str, dict]]:
    """{case: {status, seconds, reason}} from a GoogleTest JSON report; None if unreadable."""
    try:
        with open(path) as f:
            rep = json.load(f)
    except (OSError, ValueError):
        return None
    out = {}
    for suite in rep.get("testsuites", []):
        for t in suite.get("testsuite", []):
            name = f"{suite.get('name')}.{t.get('name')}"
            if t.get("failures"):
                msg = "\n".join(str(x.get("failure", "")) for x in t["failures"])
                out[name] = {"status": FAILED, "reason": msg[:2000]}
            elif t.get("result") in ("SKIPPED", "SUPPRESSED") or t.get("status") == "NOTRUN":
                out[name] = {"status": SKIPPED, "reason": ""}
            else:
                out[name] = {"status": PASSED, "reason": ""}
            out[name]["seconds"] = _secs(t.get("time"))
    return out


def gtest_log(text: str) -> Tuple[Dict[str, dict], Optional[str], Dict[str, str]]:
    """From a GoogleTest log: finished cases, the case that started and never finished (if any),
    and the skip messages ("file:line: Skipped" then the message)."""
    done, skips, running, pending_skip = {}, {}, None, []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = _GT_LINE.match(line)
        if not m:
            if running and line.endswith(": Skipped") and i + 1 < len(lines):
                pending_skip = [lines[i + 1].strip()]
            continue
        what, name, ms = m.group(1), m.group(2), m.group(3)
        if what == "RUN":
            running, pending_skip = name, []
            continue
        if name != running and ms is None:
            continue  # the closing list of failed cases repeats the names
        status = {"OK": PASSED, "FAILED": FAILED, "SKIPPED": SKIPPED}[what]
        done[name] = {"status": status, "seconds": int(ms or 0) / 1000.0, "reason": ""}
        if status == SKIPPED and pending_skip:
            skips[name] = pending_skip[0]
        running = None
    return done, running, skips


# ---- pytest ---------------------------------------------------------------------------------

def pytest_key(nodeid: str) -> str:
    """The key a pytest node id and its JUnit entry share: dotted module path (and classes),
    '::', the test name with its parameters."""
    parts = nodeid.split("::")
    path = parts[0][:-3] if parts[0].endswith(".py") else parts[0]
    return ".".join([path.replace("/", ".")] + parts[1:-1]) + "::" + parts[-1]


def pytest_list(text: str) -> List[str]:
    """Node ids from the output of pytest --collect-only -q."""
    return [ln.strip() for ln in text.splitlines() if "::" in ln and not ln.startswith(" ")]


def junit_report(path: str) -> Optional[Dict[str, dict]]:
    """{key: {status, seconds, reason}} from a JUnit XML file; None if unreadable."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    out = {}
    for tc in root.iter("testcase"):
        cls = tc.get("classname", "")  # empty for a module skipped at collection
        key = f"{cls}::{tc.get('name', '')}" if cls else tc.get("name", "")
        status, reason = PASSED, ""
        for child in tc:
            tag = child.tag
            if tag in ("failure", "error"):
                status = FAILED if tag == "failure" else ERRORED
                reason = (child.get("message") or child.text or "")[:2000]
                break
            if tag == "skipped":
                status, reason = SKIPPED, child.get("message") or ""
                m = re.search(r"Skipped: (.*?)['\"]?\)?$", (child.text or "").strip())
                if reason == "collection skipped" and m:  # the reason is in the text
                    reason = m.group(1)
        props = {p.get("name"): p.get("value") for p in tc.iter("property")}
        ws = props.get("world_size")
        # a multi-rank module's case: its own seconds (pytest's time of the first case holds
        # the launch of every rank)
        secs = _secs(props["case_seconds"]) if "case_seconds" in props else _secs(tc.get("time"))
        out[key] = {"status": status, "seconds": secs, "reason": reason,
                    "world_size": int(ws) if ws and ws.isdigit() else None}
    return out


def pytest_log(text: str) -> Dict[str, dict]:
    """Cases a pytest -v log reports (a run stopped before its JUnit file was written)."""
    out = {}
    for line in text.splitlines():
        m = _PY_LINE.match(line)
        if m:
            st = {"PASSED": PASSED, "XFAIL": PASSED, "XPASS": PASSED, "FAILED": FAILED,
                  "ERROR": ERRORED, "SKIPPED": SKIPPED}[m.group(2)]
            reason = "" if st != SKIPPED else "reported in the log only"
            out[pytest_key(m.group(1))] = {"status": st, "seconds": 0.0, "reason": reason}
    return out


# ---- one step -------------------------------------------------------------------------------

def _why_missing(step: dict) -> str:
    state = step.get("state", "ran")
    if state == "not_started":
        return "never started: " + (step.get("reason") or "the run's time budget was spent")
    if state == "missing":
        return "not run: " + (step.get("reason") or "the binary was not built")
    if step.get("timed_out"):
        return "no result: " + (step.get("reason") or
                                f"the step was stopped at its timeout ({step.get('timeout', '?')} s)")
    return f"no result: the step ended (exit code {step.get('rc')}) before reporting it"


def step_cases(step: dict) -> List[dict]:
    """Every case of one step with its verdict (see the module's docstring)."""
    kind, ws = step.get("kind"), step.get("world_size")
    found: Dict[str, dict] = {}
    crashed_in = None
    if kind == "gtest":
        rep = gtest_report(step["report"]) if step.get("report") else None
        done, crashed_in, skips = gtest_log(_read(step.get("log")))
        if rep is None:
            rep = done
        for name, v in rep.items():
            if v["status"] == SKIPPED and not v["reason"]:
                v["reason"] = skips.get(name, "")
        found = rep
        expected = list(step.get("expected") or [])
    else:
        rep = junit_report(step["report"]) if step.get("report") else None
        found = rep if rep is not None else pytest_log(_read(step.get("log")))
        expected = [pytest_key(n) for n in step.get("expected") or []]
    cases = []
    for name, v in found.items():
        cases.append({"step": step["id"], "name": name, "status": v["status"],
                      "world_size": v.get("world_size") or ws, "seconds": v.get("seconds", 0.0),
                      "reason": v.get("reason", "")})
    why = _why_missing(step)
    for name in expected:
        if name in found:
            continue
        reason = why
        if name == crashed_in:
            reason = ("started and never finished: " +
                      (step.get("reason") or "the step was stopped at its timeout")
                      if step.get("timed_out") else
                      f"started and never finished: the binary ended (exit code {step.get('rc')})")
        cases.append({"step": step["id"], "name": name, "status": ERRORED, "world_size": ws,
                      "seconds": 0.0, "reason": reason})
    if crashed_in and crashed_in not in expected and crashed_in not in found:
        cases.append({"step": step["id"], "name": crashed_in, "status": ERRORED, "world_size": ws,
                      "seconds": 0.0, "reason": "started and never finished"})
    if not cases and step.get("state", "ran") != "ran":
        cases.append({"step": step["id"], "name": "(step)", "status": ERRORED, "world_size": ws,
                      "seconds": 0.0, "reason": why})
    if step.get("sanitizer_errors"):
        cases.append({"step": step["id"], "name": "(sanitizer)", "status": FAILED,
                      "world_size": ws, "seconds": 0.0,
                      "reason": f"{step['sanitizer_errors']} sanitizer report(s) in the log"})
    rc = step.get("rc")
    bad = any(c["status"] in (FAILED, ERRORED) for c in cases)
    ok_rc = rc in (0, None) or (kind == "pytest" and rc == 5)  # 5: nothing collected
    if step.get("state", "ran") == "ran" and not ok_rc and not bad:
        cases.append({"step": step["id"], "name": "(exit code)", "status": ERRORED,
                      "world_size": ws, "seconds": 0.0,
                      "reason": ("stopped at its timeout" if step.get("timed_out") else
                                 f"exit code {rc} although no case failed")})
    return cases


def count(cases: List[dict]) -> Dict[str, int]:
    c = {PASSED: 0, FAILED: 0, SKIPPED: 0, ERRORED: 0}
    for x in cases:
        c[x["status"]] += 1
    return c


def summarize(manifest: dict) -> dict:
    steps_out, all_cases = [], []
    for step in manifest.get("steps", []):
        cases = step_cases(step)
        all_cases += cases
        row = {k: step.get(k) for k in ("id", "kind", "name", "world_size", "state", "rc",
                                        "timed_out", "seconds", "timeout", "tool")
               if k in step}
        row.update(count(cases))
        steps_out.append(row)
    rec = dict(manifest.get("meta", {}))
    rec["totals"] = count(all_cases)
    rec["steps"] = steps_out
    rec["cases"] = all_cases
    return rec


def closing_line(tag: str, totals: Dict[str, int]) -> str:
    failed = totals[FAILED] + totals[ERRORED]
    return f"{tag}: {totals[PASSED]} passed, {failed} failed, {totals[SKIPPED]} skipped"


def report(rec: dict, tag: str, out=None) -> int:
    """Prints the failed and errored cases, then the closing line; returns the exit code."""
    out = out or sys.stdout
    bad = [c for c in rec["cases"] if c["status"] in (FAILED, ERRORED)]
    for c in bad[:60]:
        first = (c["reason"] or "").strip().splitlines()[:1]
        ws = f" at {c['world_size']} ranks" if c.get("world_size") else ""
        print(f"{tag}: {c['status'].upper()} {c['step']}: {c['name']}{ws}"
              f"{': ' + first[0][:160] if first else ''}", file=out)
    if len(bad) > 60:
        print(f"{tag}: ... and {len(bad) - 60} more (see the JSON record)", file=out)
    t = rec["totals"]
    if t[ERRORED]:
        print(f"{tag}: {t[ERRORED]} of the failed never reported a result (crash, timeout or "
              f"not run)", file=out)
    print(closing_line(tag, t), file=out)
    return 1 if bad else 0


def gtest_dir(folder: str) -> dict:
    """A manifest of every GoogleTest JSON report in `folder` (one step per file)."""
    steps = []
    for f in sorted(os.listdir(folder)):
        if f.endswith(".json"):
            log = os.path.join(folder, f[:-5] + ".log")
            steps.append({"id": f[:-5], "kind": "gtest", "name": f[:-5], "world_size": None,
                          "report": os.path.join(folder, f), "log": log, "rc": None})
    return {"meta": {"folder": folder}, "steps": steps}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("manifest", nargs="?")
    ap.add_argument("out", nargs="?")
    ap.add_argument("--tag", default="summary")
    ap.add_argument("--gtest-dir")
    a = ap.parse_args(argv)
    if a.gtest_dir:
        manifest = gtest_dir(a.gtest_dir)
    elif a.manifest:
        with open(a.manifest) as f:
            manifest = json.load(f)
    else:
        ap.error("a manifest or --gtest-dir")
    rec = summarize(manifest)
    if a.out:
        with open(a.out + ".tmp", "w") as f:
            json.dump(rec, f, indent=1)
        os.replace(a.out + ".tmp", a.out)
    return report(rec, a.tag)


if __name__ == "__main__":
    sys.exit(main())
