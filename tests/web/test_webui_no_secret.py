"""No page of either web UI shows the API key (issue 52): plain `locust -f
locustfiles/chat_stepped.py --api-key SECRET` put it in the start page's `extra_options`
(`"api_key": {"default_value": "SECRET", "is_secret": true}`). Every GET route that Locust's
Flask app and vllm-load's blueprint register is read, for a key given by flag and by
$OPENAI_API_KEY; the key still reaches the settings, and a key typed in the form wins.

Locust is imported in a child process: importing it monkey-patches the standard library, which
breaks the test process (pytest-xdist's worker then waits on a patched lock forever)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from support import ROOT

SECRET = "SECRET123-never-shown"

PAGES = r"""
import json, sys
from locust.argument_parser import get_parser
from locust.env import Environment
from vllm_load.locustfile import ClosedLoopUser  # (puts our options on Locust's parser)
from vllm_load.settings import Settings
from vllm_load.web.view import ASSETS, install_web_ui

argv = json.loads(sys.argv[1])
sys.argv = ["locust", "-f", "locustfiles/chat_stepped.py", *argv]
options = get_parser().parse_args(argv)
environment = Environment(user_classes=[ClosedLoopUser], parsed_options=options)
environment.create_local_runner()
web_ui = environment.create_web_ui("127.0.0.1", 0, delayed_start=True)
install_web_ui(environment, web_ui)
client = web_ui.app.test_client()
seen = {}
for rule in web_ui.app.url_map.iter_rules():
    if "GET" not in (rule.methods or ()):
        continue
    names = sorted(ASSETS) if "name" in rule.arguments else ["index.js"]
    for value in names if rule.arguments else [None]:
        path = rule.rule
        for argument in rule.arguments:
            path = path.replace(f"<{argument}>", value).replace(f"<path:{argument}>", value)
        seen[path] = client.get(path).get_data(as_text=True)
environment.runner.quit()
key = Settings.from_options(options).api_key
options.form_api_key = "typed-in-the-form"
typed = Settings.from_options(options).api_key
print(json.dumps({"seen": seen, "key": key, "typed": typed}))
"""


def pages(argv: list[str], env: dict[str, str]) -> dict:
    """Every GET route of both UIs (those with a variable part at each of their names that
    vllm-load serves, else a made-up one) for a Locust started with `argv`: {"seen": {path:
    body}, "key": the key the load is sent with, "typed": the key with one typed in the form}."""
    done = subprocess.run(
        [sys.executable, "-c", PAGES, json.dumps(argv)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_no_page_of_either_ui_shows_the_key(how):
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    if how == "environment":
        env["OPENAI_API_KEY"] = SECRET
    argv = ["--api-key", SECRET] if how == "flag" else []
    found = pages(argv, env)
    seen = found["seen"]
    assert {"/", "/stats/requests", "/llm", "/llm/stats"} <= set(seen), sorted(seen)
    assert len(seen["/"]) > 1000 and "extra_options" in seen["/"]
    showing = [path for path, body in seen.items() if SECRET in body]
    assert not showing, f"the key is in {showing}"
    # the key is still the one the load is sent with
    assert found["key"] == SECRET
    # the form has a key field of its own, always empty: a key typed there wins
    page = re.search(r"window\.templateArgs = (\{.*\})\s*$", seen["/"], re.M).group(1)
    shown = json.loads(page)["extra_options"]
    assert shown["form_api_key"]["default_value"] == "" and shown["form_api_key"]["is_secret"]
    assert "api_key" not in shown
    assert found["typed"] == "typed-in-the-form"
