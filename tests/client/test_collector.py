"""The collector policy of load-generating processes: rare pauses, yet cyclic garbage bounded.

Run in a subprocess: it changes the interpreter-wide collector settings."""

import json
import subprocess
import sys

SCRIPT = r"""
import gc, json
from vllm_load.gc_policy import COLLECT_AFTER, quiet_collector

alive = [[i] for i in range(5000)]  # start-up state: frozen out of the collector's view
quiet_collector()
runs = []
gc.callbacks.append(lambda phase, info: phase == "stop" and runs.append(info["collected"]))

class Node:
    pass

def cycles(n):
    for _ in range(n):
        a, b = Node(), Node()
        a.other, b.other = b, a  # unreachable once the loop moves on: only the collector frees it

churn = [[j] for j in range(COLLECT_AFTER // 2)]  # freed by reference counting, no collection
del churn
after_churn = list(runs)
cycles(COLLECT_AFTER)
print(json.dumps({"threshold": gc.get_threshold()[0], "collect_after": COLLECT_AFTER,
                  "frozen": gc.get_freeze_count(), "after_churn": after_churn, "runs": runs}))
"""


def test_collections_are_rare_but_cycles_are_still_collected():
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120, check=True
    )
    result = json.loads(out.stdout)
    assert result["threshold"] == result["collect_after"]
    assert result["frozen"] >= 5000
    # 50,000 short-lived containers come and go without a single collection...
    assert result["after_churn"] == []
    # ...while 200,000 containers of cyclic garbage set off collections that free them
    assert 1 <= len(result["runs"]) <= 5
    assert sum(result["runs"]) >= result["collect_after"]


USERS_SCRIPT = r"""
import gc, json
from types import SimpleNamespace
from vllm_load.client.context import LoadContext

context = LoadContext(SimpleNamespace(parsed_options=None, runner=None))
frozen = [gc.get_freeze_count()]
for _ in range(3):
    context.user_starting()
connections = [[i] for i in range(3000)]  # what the users' first requests left alive
context.user_settled()
context.user_settled()
frozen.append(gc.get_freeze_count())
context.user_settled()  # the last user: everyone has had a response
frozen.append(gc.get_freeze_count())
print(json.dumps(frozen))
"""


def test_what_users_connect_is_frozen_once_every_user_has_had_a_response():
    out = subprocess.run(
        [sys.executable, "-c", USERS_SCRIPT],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    before, two_settled, all_settled = json.loads(out.stdout.strip().splitlines()[-1])
    assert two_settled == before
    assert all_settled >= before + 3000
