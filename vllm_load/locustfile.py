"""The built-in tests as a locustfile: `ClosedLoopUser` (exact-length synthetic prompts); with
--dataset, `DatasetUser` (the file's conversations); with --agentic, `AgenticUser` (sessions of
tool-call turns); stepped through --levels by `SteppedShape`.

`vllm-load run` runs it; so does Locust directly:
    locust -f vllm_load/locustfile.py --host http://127.0.0.1:8000 --headless
"""

from vllm_load.api import SteppedShape
from vllm_load.client.users.agentic import AgenticUser
from vllm_load.client.users.closed_loop import ClosedLoopUser
from vllm_load.client.users.dataset import DatasetUser

__all__ = ["AgenticUser", "ClosedLoopUser", "DatasetUser", "SteppedShape"]
