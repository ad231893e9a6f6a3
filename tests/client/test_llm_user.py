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
