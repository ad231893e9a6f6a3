"""A search's page with its JSON and Markdown beside it (`pareto.html`, `pareto.json`,
`pareto.md` in the search's directory), written atomically."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from ...analysis.number_text import num
from ...run_format.files import write_atomic
from .page_model import PointRow, SearchPage, SearchView, finite, view

STEM = "pareto"


@dataclass(frozen=True)
class SearchFiles:
    html: str
    json: str
    markdown: str


def _point(r: PointRow) -> dict:
    p = r.point
    return {
        "name": p.name,
        "configuration": p.configuration,
        "server_cmd": p.server_cmd,
        "gpus": p.gpus,
        "level": p.level,
        "total_tok_per_s": finite(p.total_tok_per_s),
        "total_tok_per_s_per_gpu": finite(p.total_tok_per_s_per_gpu),
        "output_tok_per_s_per_user": finite(p.output_tok_per_s_per_user),
        "meets_slo": p.meets_slo,
        "slo_max": p.slo_max,
        "on_frontier": r.on_frontier,
        "chosen": r.chosen,
        "missing": r.missing or None,
        "source": p.source,
    }


def as_json(v: SearchView) -> dict:
    page = v.page
    return {
        "format": 1,
        "kind": page.kind,
        "title": page.title,
        "unit": page.unit,
        "slo": page.slo,
        "slo_per_user_tok_per_s": page.per_user_line,
        "result": page.result_line,
        "gpus_source": page.gpus_source,
        "path": {"header": list(page.path.header), "rows": [list(r) for r in page.path.rows]},
        "points": [_point(r) for r in v.rows],
        "chosen": None
        if v.chosen is None
        else {"command": v.command, "level": v.chosen.level, "why": v.choice_line},
        **(
            {"bracket": list(page.bracket), "slo_max": page.slo_max}
            if page.bracket is not None
            else {}
        ),
    }


def as_markdown(v: SearchView) -> str:
    page = v.page
    path = page.path
    lines = [f"# {page.title}", "", page.result_line, ""]
    lines += ["## Chosen configuration", "", v.choice_line + ".", ""]
    if v.chosen is not None:
        lines += ["```", v.command, "```", ""]
    lines += ["## Search path", ""]
    lines += ["| " + " | ".join(path.header) + " |", "|" + "---|" * len(path.header)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in path.rows]
    if path.note:
        lines += ["", path.note]
    lines += ["", "## Configurations: throughput per GPU against interactivity", ""]
    header = ("configuration", page.unit, "total tok/s", "per GPU", "output tok/s per user",
              "meets SLO", "frontier")  # fmt: skip
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in v.rows:
        p = r.point
        met = "-" if p.meets_slo is None else ("yes" if p.meets_slo else "no")
        where = "chosen" if r.chosen else ("yes" if r.on_frontier else "")
        if r.missing:
            where = f"not drawn: no {r.missing}"
        lines.append(
            f"| {p.label} | {p.level:g} | {num(p.total_tok_per_s, ',.0f')} | "
            f"{num(p.total_tok_per_s_per_gpu, ',.0f')} | "
            f"{num(p.output_tok_per_s_per_user, ',.1f')} | {met} | {where} |"
        )
    if page.per_user_line is not None:
        lines += ["", f"The SLO's ITL/TPOT limit as a rate: {page.per_user_line:,.1f} output "
                  "tok/s per user."]  # fmt: skip
    lines += ["", f"GPUs: {page.gpus_source}." if page.gpus_source else ""]
    return "\n".join(lines).rstrip() + "\n"


def search_files(directory: str) -> SearchFiles:
    """Where a search's page, JSON and Markdown are in `directory`."""
    return SearchFiles(*(os.path.join(directory, f"{STEM}.{e}") for e in ("html", "json", "md")))


def write_search_outputs(directory: str, page: SearchPage) -> SearchFiles:
    """The page, its JSON and its Markdown in `directory`; returns their paths."""
    # at call time: the page draws with matplotlib (~1 s to import), which a tuning whose page
    # is left as it was (`cli/tuning/written`) never needs
    from .page import render_html

    v = view(page)
    files = search_files(directory)
    write_atomic(files.json, json.dumps(as_json(v), indent=2))
    write_atomic(files.markdown, as_markdown(v))
    write_atomic(files.html, render_html(v))
    return files
