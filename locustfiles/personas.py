"""Three personas in one run, mixed by Locust's weights: people chatting (the --dataset's
conversations), a RAG service (long retrieved context, one question) and an agent (many short
turns with tool time between them). The report breaks every table down per persona.

    vllm-load run -f locustfiles/personas.py --host http://127.0.0.1:8000 --dataset sample \
        --think-time 2,8 --levels 10,50,100
"""

import random

from locust import between, task

from vllm_load.api import LLMUser, SteppedShape  # noqa: F401 (the shape steps --levels)
from vllm_load.client.users import dataset as dataset_user

WORDS = (
    "river mountain harbour engine ledger invoice customer shipment warranty region "
    "quarter revenue forecast policy clause supplier contract battery sensor network"
).split()


def document(seed: int, words: int = 1200) -> str:
    """A retrieved passage: the same seed gives the same text (retrievals repeat, and a server
    with prefix caching may serve a repeated document from its cache, as it would in production)."""
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(words))


class Chat(dataset_user.DatasetUser):
    """People in conversation: --dataset's conversations, --think-time between turns."""

    weight = 6


class Rag(LLMUser):
    """A retrieval-augmented request: one of 20 long documents and a question about it."""

    weight = 2
    wait_time = between(0.5, 2.0)

    @task
    def answer_from_context(self):
        passage = document(random.randrange(20))
        question = f"According to the passage, what happened to the {random.choice(WORDS)}?"
        self.chat(
            [
                {"role": "system", "content": "Answer only from the passage."},
                {"role": "user", "content": f"Passage:\n{passage}\n\nQuestion: {question}"},
            ],
            max_tokens=96,
        )


class Agent(LLMUser):
    """An agent: a plan, then short steps that each wait for a tool, then a final answer."""

    weight = 2
    wait_time = between(0.05, 0.3)  # a tool call's time between two model calls

    @task
    def solve(self):
        talk = self.conversation(system="You are an agent. Reply with one tool call per step.")
        steps = random.randint(4, 8)
        if not talk.say(f"Task: reconcile {steps} invoices. Plan the steps.", max_tokens=48).ok:
            return
        for step in range(steps):
            self.wait()
            result = f'{{"invoice": {step}, "status": "{random.choice(WORDS)}"}}'
            if not talk.say(f"Tool result: {result}. Next step?", max_tokens=24).ok:
                return
        self.wait()
        talk.say("All steps are done. Summarise the outcome.", max_tokens=64)
