"""The "LLM" view in Locust's web UI: current level, live per-level table, tokens/s chart.

Two parts, both served by the master's web UI (so the numbers are the aggregate of every
worker): an "LLM" tab in Locust's own UI (a table, through Locust's extended-tab mechanism)
and a self-contained page at `/llm` with the same table and a tokens/s chart that polls
`/llm/stats` (JSON). Nothing is loaded from outside the master.
"""

from __future__ import annotations

import json
import time

from flask import Response, jsonify, request

from .auth import install_login

LEVEL_COLUMNS = [
    ("level", "Level"),
    ("users", "Users"),
    ("finished", "Finished"),
    ("req_per_s", "req/s"),
    ("total_tok_per_s", "Total tok/s"),
    ("output_tok_per_s", "Output tok/s"),
    ("ttft_p50_ms", "TTFT p50 (ms)"),
    ("ttft_p99_ms", "TTFT p99 (ms)"),
    ("itl_p99_ms", "ITL p99 (ms)"),
    ("e2e_p50_ms", "E2E p50 (ms)"),
    ("e2e_p99_ms", "E2E p99 (ms)"),
    ("success_pct", "Success %"),
]


#: the per-persona table: the level's columns with the user class after the users
PERSONA_COLUMNS = [*LEVEL_COLUMNS[:2], ("user_class", "Persona"), *LEVEL_COLUMNS[2:]]


def snapshot(environment) -> dict:
    live = getattr(environment, "vllm_load_live", None)
    if live is None:
        return {
            "current_level": None,
            "current_users": 0,
            "levels": [],
            "personas": [],
            "series": [],
            "running": False,
        }
    data = live.snapshot(time.time())
    runner = environment.runner
    data["running"] = getattr(runner, "state", "") in ("spawning", "running")
    data["user_count"] = getattr(runner, "user_count", 0)
    return data


def install_web_ui(environment, web_ui) -> None:
    app = web_ui.app
    if web_ui.web_login:  # Locust's --web-login: our login, and our routes behind it too
        install_login(environment, web_ui)

    @app.route("/llm/stats")
    @web_ui.auth_required_if_enabled
    def llm_stats():
        return jsonify(snapshot(environment))

    @app.route("/llm")
    @web_ui.auth_required_if_enabled
    def llm_page():
        return Response(
            PAGE.replace("__COLUMNS__", json.dumps(LEVEL_COLUMNS)).replace(
                "__PERSONA_COLUMNS__", json.dumps(PERSONA_COLUMNS)
            ),
            mimetype="text/html",
        )

    @app.after_request
    def add_llm_table(response):
        if request.path != "/stats/requests" or not response.is_json:
            return response
        data = snapshot(environment)
        rows = [
            dict(
                row,
                level=f"{row['level']}{' (current)' if row['level'] == data['current_level'] and data['running'] else ''}",
            )
            for row in data["levels"]
        ]
        extended = [{"key": "llm", "data": rows}, {"key": "llm_personas", "data": data["personas"]}]
        response.set_data(json.dumps({**response.json, "extended_stats": extended}))
        return response

    web_ui.template_args["extended_tabs"] = [
        {"title": "LLM", "key": "llm"},
        {"title": "LLM by persona", "key": "llm_personas"},
    ]
    web_ui.template_args["extended_tables"] = [
        {"key": "llm", "structure": [{"key": key, "title": title} for key, title in LEVEL_COLUMNS]},
        {
            "key": "llm_personas",
            "structure": [{"key": key, "title": title} for key, title in PERSONA_COLUMNS],
        },
    ]
    web_ui.template_args["extended_csv_files"] = [
        {"href": "/llm", "title": "LLM live view (tokens/s chart)"}
    ]


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>vllm-load: LLM view</title>
<style>
 body { font-family: system-ui, sans-serif; margin: 24px; color: #1d2330; }
 h1 { font-size: 20px; margin: 0 0 4px; } .muted { color: #667; font-size: 13px; }
 #level { font-size: 28px; font-weight: 600; margin: 12px 0; }
 table { border-collapse: collapse; margin: 12px 0; font-variant-numeric: tabular-nums; }
 th, td { border-bottom: 1px solid #dde; padding: 4px 10px; text-align: right; }
 th { background: #f3f4f8; } tr.current td { background: #fff6d6; }
 svg { border: 1px solid #dde; background: #fcfcfe; }
</style></head>
<body>
<h1>vllm-load &mdash; LLM view</h1>
<div class="muted">Live figures over every finished request of a level (warm-up included); the report's measured-window figures are the ones to publish. <a href="/">Locust UI</a></div>
<div id="level">no test yet</div>
<div>Output tokens/s <span id="tokps">0</span> &middot; total tokens/s <span id="totps">0</span></div>
<svg id="chart" width="900" height="260" role="img" aria-label="tokens per second"></svg>
<table id="levels"><thead></thead><tbody></tbody></table>
<div id="by-persona" hidden><h2 style="font-size:16px">Per persona</h2>
<table id="personas"><thead></thead><tbody></tbody></table></div>
<script>
const COLUMNS = __COLUMNS__;
const PERSONA_COLUMNS = __PERSONA_COLUMNS__;
document.querySelector('#personas thead').innerHTML = '<tr>' + PERSONA_COLUMNS.map(c => '<th>' + c[1] + '</th>').join('') + '</tr>';
const head = document.querySelector('#levels thead');
head.innerHTML = '<tr>' + COLUMNS.map(c => '<th>' + c[1] + '</th>').join('') + '</tr>';
function fmt(v) { return v === null || v === undefined ? '' : (typeof v === 'number' ? v.toLocaleString() : String(v)); }
function drawChart(series) {
  const svg = document.getElementById('chart'); const W = 900, H = 260, P = 40;
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  if (!series.length) return;
  const max = Math.max(1, ...series.map(p => p.total_tok_per_s));
  const t0 = series[0].t, t1 = series[series.length - 1].t || t0 + 1;
  const x = t => P + (W - 2 * P) * (t - t0) / Math.max(1, t1 - t0);
  const y = v => H - P + (-(H - 2 * P)) * v / max;
  const ns = 'http://www.w3.org/2000/svg';
  for (const [key, color] of [['total_tok_per_s', '#9aa7c7'], ['output_tok_per_s', '#2b59c3']]) {
    const path = document.createElementNS(ns, 'polyline');
    path.setAttribute('fill', 'none'); path.setAttribute('stroke', color); path.setAttribute('stroke-width', '2');
    path.setAttribute('points', series.map(p => x(p.t) + ',' + y(p[key])).join(' '));
    svg.appendChild(path);
  }
  const label = document.createElementNS(ns, 'text');
  label.setAttribute('x', 4); label.setAttribute('y', 14); label.setAttribute('font-size', '12');
  label.textContent = 'max ' + Math.round(max).toLocaleString() + ' tok/s (blue: output, grey: total)';
  svg.appendChild(label);
}
async function refresh() {
  try {
    const data = await (await fetch('/llm/stats')).json();
    const lvl = document.getElementById('level');
    lvl.textContent = data.current_level === null ? 'no test yet'
      : 'Level ' + data.current_level + ': ' + data.current_users + ' users' + (data.running ? '' : ' (stopped)');
    const last = data.series.length ? data.series[data.series.length - 1] : {output_tok_per_s: 0, total_tok_per_s: 0};
    document.getElementById('tokps').textContent = Math.round(last.output_tok_per_s).toLocaleString();
    document.getElementById('totps').textContent = Math.round(last.total_tok_per_s).toLocaleString();
    document.querySelector('#levels tbody').innerHTML = data.levels.map(r =>
      '<tr class="' + (r.level === data.current_level && data.running ? 'current' : '') + '">' +
      COLUMNS.map(c => '<td>' + fmt(r[c[0]]) + '</td>').join('') + '</tr>').join('');
    document.getElementById('by-persona').hidden = !data.personas.length;
    document.querySelector('#personas tbody').innerHTML = data.personas.map(r =>
      '<tr class="' + (r.level === data.current_level && data.running ? 'current' : '') + '">' +
      PERSONA_COLUMNS.map(c => '<td>' + fmt(r[c[0]]) + '</td>').join('') + '</tr>').join('');
    drawChart(data.series);
  } catch (e) { /* the master may be restarting; try again */ }
}
refresh(); setInterval(refresh, 2000);
</script></body></html>
"""
