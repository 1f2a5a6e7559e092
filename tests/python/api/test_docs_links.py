"""Every relative link in README.md, docs/**/*.md and bench/README.md points at a file or folder
that exists, and every link to a heading of a markdown file names a heading that file has."""
import glob
import os
import re

import harness

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")


def _pages():
    pages = [os.path.join(harness.ROOT, "README.md"),
             os.path.join(harness.ROOT, "bench", "README.md")]
    pages += glob.glob(os.path.join(harness.ROOT, "docs", "**", "*.md"), recursive=True)
    return sorted(p for p in pages if os.path.exists(p))


def _text_outside_code(path):
    out, in_code = [], False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if FENCE.match(line.strip()):
                in_code = not in_code
                continue
            if not in_code:
                out.append(re.sub(r"`[^`]*`", "", line))
    return out


def _anchors(path):
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    anchors = set()
    for line in _text_outside_code(path):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            a = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            anchors.add(a)
    return anchors


def _links(path):
    for n, line in enumerate(_text_outside_code(path), 1):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            yield n, target


def test_the_docs_are_found():
    pages = [os.path.relpath(p, harness.ROOT) for p in _pages()]
    assert "README.md" in pages and os.path.join("docs", "DESIGN.md") in pages, pages


def test_every_relative_link_resolves():
    bad = []
    for page in _pages():
        for n, target in _links(page):
            file_part, _, anchor = target.partition("#")
            dest = (os.path.normpath(os.path.join(os.path.dirname(page), file_part))
                    if file_part else page)
            rel = os.path.relpath(page, harness.ROOT)
            if not os.path.exists(dest):
                bad.append(f"{rel}:{n}: {target} (no such file)")
            elif anchor and dest.endswith(".md") and anchor not in _anchors(dest):
                bad.append(f"{rel}:{n}: {target} (no such heading)")
    assert not bad, "broken links:\n" + "\n".join(bad)
