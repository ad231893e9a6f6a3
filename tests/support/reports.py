"""Synthetic run directories to report on, and the PNG charts embedded in a report."""

from __future__ import annotations

import base64
import io
import json
import re

from PIL import Image

from vllm_load.run_format.synthetic import SyntheticRun, write_synthetic_run
from vllm_load.run_format.synthetic_personas import Persona

#: the levels of every synthetic run
LEVELS = (10, 50, 100, 200)


def synthetic_runs(base, n, model="synthetic/model-8b", **kwargs):
    spec = {
        **dict(levels=LEVELS, requests_per_level=60, warmup_requests=6, output_tokens=64),
        **kwargs,
    }
    return [
        write_synthetic_run(str(base), SyntheticRun(model=model, seed=i, **spec)) for i in range(n)
    ]


#: two personas: chatters holding four-turn conversations, and RAG users twice as slow
PERSONAS = (
    Persona("Chat", weight=3, turns=4, turn_tokens=256),
    Persona("Rag", weight=1, latency_scale=2.0),
)


def persona_runs(base, n, personas=PERSONAS, **kwargs):
    """`synthetic_runs` whose users are `personas` (enough requests that each has some at
    every level)."""
    kwargs = {**dict(requests_per_level=200, warmup_requests=20), **kwargs}
    return synthetic_runs(base, n, personas=personas, **kwargs)


def embedded_pngs(html: str) -> list[Image.Image]:
    images = []
    for b64 in re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html):
        image = Image.open(io.BytesIO(base64.b64decode(b64)))
        image.load()
        images.append(image)
    return images


def report(runs: list[str], path) -> tuple[dict, str, str]:
    """(summary.json, HTML, Markdown) of a report on `runs`."""
    from vllm_load.report.render import build_report

    paths = build_report(runs, str(path), progress=False)
    with open(paths.json) as js, open(paths.html) as html, open(paths.markdown) as md:
        return json.load(js), html.read(), md.read()


def why_sections(html: str, markdown: str) -> tuple[str, str]:
    """The "Why it saturates" sections of the HTML and the Markdown; each must come right after
    the key findings, before the summary."""
    assert html.index('<section id="findings">') < html.index('<section id="why">')
    html_part = html[html.index('<section id="why">') : html.index('<section id="comparison">')]
    assert markdown.index("## Key findings") < markdown.index("## Why it saturates")
    md_part = markdown[markdown.index("## Why it saturates") : markdown.index("## Summary")]
    return html_part, md_part
