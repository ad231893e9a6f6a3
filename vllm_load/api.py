"""What a locustfile imports to write its own LLM users (docs/workload.md, "Your own workload").

    from locust import between, task
    from vllm_load.api import LLMUser, SteppedShape

    class Chat(LLMUser):
        wait_time = between(1, 3)

        @task
        def two_turns(self):
            talk = self.conversation()
            if talk.say("Name three rivers.", max_tokens=64).ok:
                talk.say("Which is the longest?", max_tokens=64)

Importing this module wires vllm-load into Locust's events (options, the run directory, worker
reports, the web UI's LLM view). `SteppedShape` steps the users through --levels as the built-in
test does; leave it out to drive the user count with Locust's own options instead.
"""

from .client.users.conversation import Conversation
from .client.users.llm_user import LLMUser, Reply
from .run import wiring as run_wiring
from .run.shape import SteppedShape
from .web import wiring as web_wiring

run_wiring.install()  # the run's listeners first: its options come first in --help
web_wiring.install()

__all__ = ["Conversation", "LLMUser", "Reply", "SteppedShape"]
