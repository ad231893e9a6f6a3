"""The "LLM" view in Locust's web UI: live time-series charts and the per-level table.

Served by the master's web UI, so the numbers are the aggregate of every worker, and nothing
is loaded from outside it. Two places show the same charts (`static/llm-charts.js`, drawn from
`/llm/stats`, whose time series is `run.live_series`'s):

- the "LLM" and "LLM by persona" tabs of Locust's own UI: their tables (per level; per level
  and persona) are Locust's extended tabs (rows carried in `/stats/requests`'
  `extended_stats`); Locust's extended tabs render a table only, so the charts come from a
  script this module adds to Locust's page (`static/llm-tab.js`), which puts them above the
  table while the tab is selected (in the persona tab, a line per persona);
- the page at `/llm` (`static/llm.html`), the charts and the tables on their own.

Each level's row carries its bottleneck verdict so far (`run.live_verdict`), the current
level's also above the charts. The tables' columns are the live figures shown now
(`run.live_figures`: those declared `figures.LIVE`, a reasoning model's TTFAT once a level has
had reasoning), sent with every `/llm/stats` (`columns`); Locust's page takes them when it is
loaded (its `extended_tables`).

Locust's header shows `/stats/requests`' user count, which this module keeps current
(`add_llm_stats`).
"""

from __future__ import annotations

import json
import os
import sys
import time

from flask import Blueprint, Response, jsonify, request, send_from_directory

from ..compat.locust import WEB_INDEX_ENDPOINT, WEB_STATS_ENDPOINT
from ..run.live_figures import LivePlan
from ..run.live_series import Timeline
from .auth import install_login
from .bind import open_web_ui_refusal, warn_if_open
from .columns import TAB_ROWS, extended_tables, table_columns
from .guard import install_guards

STATIC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
ASSETS = ("llm-charts.js", "llm-tab.js", "llm.css")
# added to Locust's page (its index.html ends with </body>): the charts of the LLM tab
TAB_TAGS = (
    '<link rel="stylesheet" href="./llm/assets/llm.css">'
    '<script src="./llm/assets/llm-charts.js"></script>'
    '<script src="./llm/assets/llm-tab.js"></script>'
)


def snapshot(environment, series: bool = True, since: float | None = None) -> dict:
    """The LLM view's figures; `running` and `user_count` from the runner, as of now."""
    live = getattr(environment, "vllm_load_live", None)
    now = time.time()
    if live is None:
        data: dict = {
            "current_level": None,
            "current_users": 0,
            "verdict": None,
            "figures": LivePlan().table_columns(lambda key: False),
            "levels": [],
            "personas": [],
            "targets": [],
        }
        if series:
            data["series"] = Timeline().as_dict(now)
    else:
        data = live.snapshot(now, series=series, since=since)
    data["columns"] = table_columns(data["figures"])
    runner = environment.runner
    data["running"] = getattr(runner, "state", "") in ("spawning", "running")
    data["user_count"] = getattr(runner, "user_count", 0)
    return data


def page() -> str:
    with open(os.path.join(STATIC, "llm.html"), encoding="utf-8") as fh:
        return fh.read()


def install_web_ui(environment, web_ui) -> None:
    options = environment.parsed_options
    refusal = open_web_ui_refusal(
        web_ui.host, web_ui.web_login, getattr(options, "web_insecure_no_login", False)
    )
    if refusal:  # (before Locust starts serving: init fires first)
        print(f"vllm-load: error: {refusal}", file=sys.stderr, flush=True)
        raise SystemExit(2)
    warn_if_open(web_ui.host, web_ui.web_login)
    app = web_ui.app
    if web_ui.web_login:  # Locust's --web-login: our login, and our routes behind it too
        install_login(environment, web_ui)
    base_path = getattr(options, "web_base_path", "") or ""
    install_guards(environment, web_ui, base_path)
    # beside Locust's own routes (under --web-base-path like them): relative links work from both
    blueprint = Blueprint("vllm_load_llm", __name__, url_prefix=base_path or None)

    @blueprint.route("/llm/stats")
    @web_ui.auth_required_if_enabled
    def llm_stats():
        since = request.args.get("since", type=float)
        return jsonify(snapshot(environment, since=since))

    @blueprint.route("/llm")
    @web_ui.auth_required_if_enabled
    def llm_page():
        return Response(page(), mimetype="text/html")

    @blueprint.route("/llm/assets/<name>")
    @web_ui.auth_required_if_enabled
    def llm_asset(name: str):
        if name not in ASSETS:
            return Response("not found", status=404, mimetype="text/plain")
        return send_from_directory(STATIC, name, max_age=0)

    app.register_blueprint(blueprint)

    @app.before_request
    def current_tables():
        # Locust's page takes its tables' columns when it is loaded: those shown by then
        if request.endpoint == WEB_INDEX_ENDPOINT:
            columns = snapshot(environment, series=False)["columns"]
            web_ui.template_args["extended_tables"] = extended_tables(columns)

    @app.after_request
    def extend_locust_ui(response):
        if request.endpoint == WEB_INDEX_ENDPOINT and response.status_code == 200:
            return add_tab_scripts(response)
        if request.endpoint == WEB_STATS_ENDPOINT and response.is_json:
            return add_llm_stats(environment, response)
        return response

    web_ui.template_args["extended_tabs"] = [{"title": t, "key": k} for k, _, t in TAB_ROWS]
    web_ui.template_args["extended_tables"] = extended_tables(
        snapshot(environment, series=False)["columns"]
    )
    web_ui.template_args["extended_csv_files"] = [
        {"href": "./llm", "title": "LLM live view (charts and levels)"}
    ]


def add_tab_scripts(response):
    """Locust's page with the LLM tab's charts script (before its </body>, or at the end)."""
    html = response.get_data(as_text=True)
    at = html.rfind("</body>")
    html = html[:at] + TAB_TAGS + html[at:] if at >= 0 else html + TAB_TAGS
    response.set_data(html)
    return response


def add_llm_stats(environment, response):
    """Locust's /stats/requests with the LLM tables' rows (`extended_stats`), and its user count
    as of now.

    Locust memoizes /stats/requests for 2 s (longer once a computation takes longer) and its UI
    polls it every 2 s, so the count in the header came up to about 4 s late: with the shape's
    1 s tick, the previous level's users for the first seconds of every level (all of a short
    level's). The count (and the status) is the runner's, read at each request instead; the
    response object is the memoized one, so every field set here is set afresh each time.
    """
    data = snapshot(environment, series=False)
    rows = [
        dict(
            row,
            level=f"{row['level']}{' (current)' if row['level'] == data['current_level'] and data['running'] else ''}",
        )
        for row in data["levels"]
    ]
    extended = [
        {"key": key, "data": rows if of == "levels" else data[of]} for key, of, _ in TAB_ROWS
    ]
    payload = {**response.json, "extended_stats": extended}
    if environment.runner is not None:  # the header's users and status, as of now
        payload["user_count"] = environment.runner.user_count
        payload["state"] = environment.runner.state
    response.set_data(json.dumps(payload))
    return response
