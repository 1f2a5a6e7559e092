"""Aggregates GoogleTest JSON reports (GTEST_OUTPUT=json:DIR/) into one summary on stdout:
per executable and in total, how many cases passed, failed and were skipped."""
import json
import pathlib
import sys


def main(folder: str) -> int:
    total = {"passed": 0, "failed": 0, "skipped": 0}
    per = {}
    for f in sorted(pathlib.Path(folder).glob("*.json")):
        rep = json.loads(f.read_text())
        c = {"passed": 0, "failed": 0, "skipped": 0, "failures": []}
        for suite in rep.get("testsuites", []):
            for t in suite.get("testsuite", []):
                name = f"{suite['name']}.{t['name']}"
                if t.get("failures"):
                    c["failed"] += 1
                    c["failures"].append(name)
                elif t.get("result") == "SKIPPED" or t.get("status") == "NOTRUN":
                    c["skipped"] += 1
                else:
                    c["passed"] += 1
        per[f.stem] = c
        for k in total:
            total[k] += c[k]
    json.dump({"total": total, "executables": per}, sys.stdout, indent=1)
    print()
    return 1 if total["failed"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
