"""The README stays short enough to read to the end, and every relative link in it and in the
docs pages leads somewhere: to a file that exists and, for `page.md#anchor`, to a heading of
that page (anchors as GitHub makes them from headings)."""

from __future__ import annotations

import os
import re

from support import ROOT

#: the README is the newcomer's page; what is longer goes to a page of docs/
README_MAX_LINES = 260

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def pages() -> list[str]:
    docs = os.path.join(ROOT, "docs")
    return [os.path.join(ROOT, "README.md")] + sorted(
        os.path.join(docs, name) for name in os.listdir(docs) if name.endswith(".md")
    )


def prose(path: str) -> str:
    """A Markdown file without its fenced code blocks (a link inside one is code, not a link)."""
    with open(path, encoding="utf-8") as fh:
        return FENCE.sub("", fh.read())


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, Markdown's backticks and punctuation dropped
    (letters, digits, `_`, `-` and spaces kept), each space a hyphen."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(path: str) -> set[str]:
    """Every heading's anchor; a repeated heading gets -1, -2, ... as GitHub numbers it."""
    seen: dict[str, int] = {}
    found = set()
    for match in re.finditer(r"^#{1,6} (.+)$", prose(path), re.M):
        base = slug(match.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(path: str) -> list[str]:
    broken = []
    for target in LINK.findall(prose(path)):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:: not ours to check
            continue
        file_part, _, anchor = target.partition("#")
        linked = (
            os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
        )
        where = os.path.relpath(path, ROOT)
        if not os.path.exists(linked):
            broken.append(f"{where}: {target}: no such file")
        elif anchor and linked.endswith(".md") and anchor not in anchors(linked):
            broken.append(f"{where}: {target}: no heading with that anchor")
    return broken


def test_the_readme_is_short():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): move a section to a page "
        "of docs/ and link it"
    )


def test_every_relative_link_of_the_readme_and_the_docs_resolves():
    broken = [line for path in pages() for line in broken_links(path)]
    assert not broken, "\n".join(broken)


def test_the_anchors_are_githubs():
    assert slug("Your own workload: a locustfile") == "your-own-workload-a-locustfile"
    assert (
        slug("Is B really better than A? `vllm-load compare`")
        == "is-b-really-better-than-a-vllm-load-compare"
    )
    assert (
        slug("GPU utilisation, power and energy per token")
        == "gpu-utilisation-power-and-energy-per-token"
    )
