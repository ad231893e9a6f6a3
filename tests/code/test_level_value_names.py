"""A level is named by its `value` in its kind of load (`load_kinds`); `users` is only ever the
Locust users run for it (issue 38). No code copies a level's value into a `users` column, keeps
the Locust users aside in a `locust_users`, or names a level value `*_users` (a saturation
point's, a peak's, a scaling's ends), where a rate run's requests/s would pass for users."""

import re
from pathlib import Path

from support import ROOT

#: what the users-as-rate column looked like
PATTERNS = {
    "locust_users": re.compile(r"\blocust_users\b"),
    "value copied into users": re.compile(
        r"""\[\s*["']users["']\s*\]\s*=[^=\n]*\bvalue\b"""  # frame["users"] = frame["value"]
        r"""|["']users["']\s*:[^,\n]*\[\s*["']value["']\s*\]"""  # {"users": rec["value"]}
        r"""|\busers\s*=[^=\n]*\[\s*["']value["']\s*\]"""  # assign(users=frame["value"])
    ),
    "a level value named users": re.compile(
        r"\b(?:peak|saturation|point|scaling|cost)\.users\b"
        r"|\b(?:from|to|peak|goodput_peak|throughput_peak|dist|knee|slo)_users\b"
    ),
}


def _found(root: Path) -> list[str]:
    return [
        f"{path.relative_to(root)}:{n}: {what}: {line.strip()}"
        for path in sorted(root.rglob("*"))
        if path.suffix in (".py", ".html", ".md", ".js")
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        for what, pattern in PATTERNS.items()
        if pattern.search(line)
    ]


def test_no_level_value_passes_for_users():
    found = _found(Path(ROOT) / "vllm_load")
    assert not found, "a level's value named `users` (name it `value`):\n" + "\n".join(found)


def test_the_patterns_catch_what_they_name(tmp_path):
    """Each pattern finds the line it was written for (so the test above can fail)."""
    lines = [
        'metrics["locust_users"] = metrics["users"]',
        'metrics["users"] = metrics["value"]',
        'rows.append({"users": window["value"], "level": 1})',
        'errors.assign(users=errors["level"].map(values))  # fine',
        'errors.assign(users=frame["value"])',
        "report.dist_users = point.users",
        "{{ sat.peak.users | num }}",
        'summary["goodput_peak_users"]',
    ]
    (tmp_path / "m.py").write_text("\n".join(lines), encoding="utf-8")
    found = _found(tmp_path)
    assert [int(f.split(":")[1]) for f in found] == [1, 2, 3, 5, 6, 7, 8], found
