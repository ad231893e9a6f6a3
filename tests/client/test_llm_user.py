"""LLMUser as a Locust User: what Locust itself calls on it keeps working.

Runs in a subprocess: Locust (gevent) must not be imported into pytest.
"""

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    from locust.env import Environment

    from vllm_load.client.context import LoadContext
    from vllm_load.client.users.llm_user import LLMUser

    class PingUser(LLMUser):
        # a locustfile's subclass that also uses Locust's own client (say, for a health check)
        host = "http://127.0.0.1:9"  # discard port: nothing listens, the request fails fast

    # Locust's clients call `user.context()` (a method of User) on every request: the
    # process-wide LoadContext must not shadow it
    user = PingUser(Environment(user_classes=[PingUser]))
    response = user.client.get("/health")  # was: TypeError: 'LoadContext' object is not callable
    assert response.status_code == 0 and response.error is not None, response  # refused
    assert user.context() == {}
    assert isinstance(user.load_context, LoadContext)
    print("ok")
""")


def test_locust_client_requests_work_on_an_llm_user():
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stdout + proc.stderr


REPLY = textwrap.dedent("""
    from types import SimpleNamespace

    from vllm_load.client.users.llm_user import Reply
    from vllm_load.run_format.records import COLUMNS, RequestRecord

    values = dict.fromkeys(COLUMNS, None)
    values.update(ok=0, prompt_tokens=41, completion_tokens=7, ttft=0.25, e2e=1.5,
                  error="timeout_stall", error_message="no bytes for 5 s", request_id="req-7")
    record = RequestRecord(**values)
    request = SimpleNamespace(text="the text", spec=SimpleNamespace(keep_text=True),
                              meter=SimpleNamespace(finish_reason="length"), tool_calls=[])
    reply = Reply.of(request, record)
    assert reply == Reply(ok=False, text="the text", prompt_tokens=41, completion_tokens=7,
                          ttft=0.25, e2e=1.5, finish_reason="length", error="timeout_stall",
                          error_message="no bytes for 5 s", request_id="req-7",
                          tool_calls=[]), reply
    request.spec.keep_text = False
    assert Reply.of(request, record).text == ""
    print("ok")
""")


def test_a_reply_carries_each_of_its_records_fields():
    """`Reply.of` (positional, for its cost per request) puts every value in its own field."""
    done = subprocess.run([sys.executable, "-c", REPLY], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-2000:]
