"""Names in the Markdown reports are text: a model id, a persona (user class) or a side's name that
holds HTML, a link, emphasis or a table's `|` shows as itself when the .md is rendered
(CommonMark with GitHub's tables, by markdown-it), in headings, tables and findings alike."""

from __future__ import annotations

import html
import re

import pytest
from markdown_it import MarkdownIt
from support.reports import persona_runs, synthetic_runs

from vllm_load.cli.main import main
from vllm_load.report.render import build_report, md, md_code
from vllm_load.run_format.synthetic import ServerModel
from vllm_load.run_format.synthetic_personas import Persona

IMG_MODEL = "<img src=x onerror=alert(1)>"
LINK_MODEL = "[click](javascript:alert(2))|**loud**"
SCRIPT_PERSONA = "<script>alert(3)</script>"
CODE_PERSONA = "`tick` _slant_ ~~gone~~"
#: what a name must never turn into once the Markdown is rendered
MARKUP = re.compile(r"<(img|script|a|strong|em|code|del|s)\b", re.I)


def rendered(markdown: str) -> str:
    return MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(markdown)


def text_of(page: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", page))


def test_names_in_the_report_stay_text(tmp_path):
    runs = persona_runs(
        tmp_path,
        1,
        model=IMG_MODEL,
        personas=(Persona(SCRIPT_PERSONA), Persona(CODE_PERSONA, latency_scale=1.5)),
        levels=(10, 50),
    ) + synthetic_runs(
        tmp_path, 1, model=LINK_MODEL, levels=(10, 50), server=ServerModel(max_num_seqs=50)
    )
    paths = build_report(runs, str(tmp_path / "r.html"), progress=False)
    markdown = open(paths.markdown, encoding="utf-8").read()
    page = rendered(markdown)
    assert not MARKUP.search(page), MARKUP.search(page)
    assert "href=" not in page  # (the report has no link of its own in Markdown)
    text = text_of(page)
    for name in (IMG_MODEL, LINK_MODEL, SCRIPT_PERSONA, CODE_PERSONA):
        assert name in text, name
    # a `|` in a name stays in its cell: every row of every table has its header's cells
    for table in re.findall(r"<table>.*?</table>", page, re.S):
        head = len(re.findall(r"<th\b", table.split("</thead>")[0]))
        for row in re.findall(r"<tbody>.*?</tbody>", table, re.S):
            for tr in re.findall(r"<tr>.*?</tr>", row, re.S):
                assert len(re.findall(r"<td\b", tr)) == head, tr
    # the comparison's findings name both models, as text
    assert any(IMG_MODEL in line and LINK_MODEL in line for line in text.splitlines())


@pytest.mark.parametrize("name", [IMG_MODEL, LINK_MODEL, CODE_PERSONA])
def test_the_names_of_a_comparisons_sides_stay_text(tmp_path, name):
    sides = []
    for side, seqs in (("a", 16), ("b", 64)):
        synthetic_runs(
            tmp_path / side,
            2,
            levels=(8, 32),
            requests_per_level=30,
            warmup_requests=4,
            server=ServerModel(max_num_seqs=seqs, run_noise=0.02),
        )
        sides.append(str(tmp_path / side))
    out = str(tmp_path / "ab.html")
    main(["compare", *sides, "--a-name", name, "--b-name", "B", "-o", out])
    page = rendered(open(out.replace(".html", ".md"), encoding="utf-8").read())
    assert not MARKUP.search(
        page.replace("<strong>B better</strong>", "")
        .replace("<strong>B worse</strong>", "")
        .replace("<strong>Outcome:</strong>", "")  # the template's own emphasis
    ), page[:2000]
    assert name in text_of(page)


def test_md_and_md_code_on_their_own():
    assert md("a|b\nc") == "a\\|b c"
    assert md("# not a heading").startswith("\\#") and md("1. not a list") == "1\\. not a list"
    assert md("Qwen/Qwen3-8B 2.5x") == "Qwen/Qwen3-8B 2.5x"  # ordinary names unchanged
    for text in ("runs/a`b", "``x``", "plain/prefix"):
        span = md_code(text)
        code = re.findall(r"<code>(.*?)</code>", rendered(span))
        assert code and html.unescape(code[0]).strip() == text, (text, span, code)
