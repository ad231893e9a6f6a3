"""Write the sample traces shipped in vllm_load/workload/traces/samples/, one per published format,
each 60 s of bursty traffic small enough to replay on the simulator or a tiny CPU model
(prompts of at most 3000 tokens, outputs of at most 256):

- `mooncake_60s.jsonl`: Mooncake JSONL with shared hash_ids (system prompts and conversations),
- `burstgpt_sample.csv`: BurstGPT CSV, with a few failed requests (Response tokens 0),
- `azure_sample.csv`: Azure LLM inference trace CSV, with real datetime strings.

Arrivals: a two-state Markov-modulated Poisson process (MMPP): a base state of BASE_RATE
requests/s and a burst state of BURST_RATE, each held for an exponential time of mean BASE_HOLD
or BURST_HOLD seconds, starting in the base state; so the mean rate is about
(BASE_RATE * BASE_HOLD + BURST_RATE * BURST_HOLD) / (BASE_HOLD + BURST_HOLD), 7.6/s.

Lengths: lognormal (a median and the sigma of the log), rounded and clipped; see each format's
function. Everything comes from generators seeded with SEED, so a re-run writes the same bytes
(tests/workload/test_trace_samples.py checks it). Re-run after changing this script, and commit
the files with it:

    python scripts/make_sample_traces.py            # writes vllm_load/workload/traces/samples/
    python scripts/make_sample_traces.py --out DIR  # writes elsewhere
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import random
import sys
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # the package beside this script, to read back what it wrote

from vllm_load.workload.traces import read_trace, reuse_summary  # noqa: E402

SEED = 20260312
DURATION = 60.0
BASE_RATE, BURST_RATE = 4.0, 24.0  # requests/s
BASE_HOLD, BURST_HOLD = 9.0, 2.0  # mean seconds in each state
BLOCK = 512  # Mooncake's tokens per hash id
MAX_PROMPT, MAX_OUTPUT = 3000, 256

# Mooncake sample: system prompts of 1 to 3 blocks (by popularity), and conversations whose
# later turns send the earlier turn's prompt and reply again before a new message
SYSTEM_PROMPT_BLOCKS = (1, 1, 2, 3)
SYSTEM_PROMPT_WEIGHTS = (0.4, 0.25, 0.2, 0.15)
SYSTEM_PROMPT_SHARE = 0.7  # of first turns and single requests: the rest have none
NEXT_TURN_SHARE = 0.4  # of arrivals, while a conversation is open: its next turn
CONVERSATION_SHARE = 0.5  # of the other arrivals: the first turn of a conversation
MAX_TURNS = 5


def lognormal(rng: random.Random, median: float, sigma: float, low: int, high: int) -> int:
    """A whole number: lognormal around `median` (sigma of the log), clipped to [low, high]."""
    return max(low, min(high, round(math.exp(rng.gauss(math.log(median), sigma)))))


def mmpp_arrivals(rng: random.Random) -> tuple[list[float], int]:
    """Arrival times in [0, DURATION) from the two-state MMPP, and how many bursts it had."""
    times: list[float] = []
    now, bursting, bursts = 0.0, False, 0
    while now < DURATION:
        hold_end = min(DURATION, now + rng.expovariate(1 / (BURST_HOLD if bursting else BASE_HOLD)))
        rate = BURST_RATE if bursting else BASE_RATE
        t = now + rng.expovariate(rate)
        while t < hold_end:  # memoryless: the arrivals of one state's hold are Poisson in it
            times.append(t)
            t += rng.expovariate(rate)
        now, bursting = hold_end, not bursting
        bursts += bursting and now < DURATION
    return times, bursts


@dataclass
class Conversation:
    """An open conversation: its last turn's prompt (tokens and block ids) and reply length."""

    prompt: int
    ids: list[int]
    reply: int
    turns: int = 1


@dataclass
class BlockIds:
    """Mooncake's hash ids: each new block gets the next whole number."""

    next_id: int = 0
    system_prompts: list[list[int]] = field(default_factory=list)

    def new(self, count: int) -> list[int]:
        ids = list(range(self.next_id, self.next_id + count))
        self.next_id += count
        return ids


def mooncake(rng: random.Random) -> tuple[list[dict], int]:
    """Requests whose prompts share blocks: single requests and first turns draw a prompt
    lognormal(800, 0.6) in [128, 3000] and, 70 % of them, start with the most popular system
    prompt that fits in it; a conversation's next turn sends its last prompt and reply again and
    a new message lognormal(120, 0.7) in [16, 600], so its earlier full blocks recur; it ends
    after MAX_TURNS turns or when it would pass 3000 tokens. Outputs lognormal(64, 0.6) in
    [8, 256]."""
    times, bursts = mmpp_arrivals(rng)
    blocks = BlockIds()
    blocks.system_prompts = [blocks.new(n) for n in SYSTEM_PROMPT_BLOCKS]
    open_conversations: list[Conversation] = []
    entries = []
    for t in times:
        output = lognormal(rng, 64, 0.6, 8, MAX_OUTPUT)
        turn = None
        if open_conversations and rng.random() < NEXT_TURN_SHARE:
            conversation = rng.choice(open_conversations)
            turn = next_turn(rng, blocks, conversation, output)
            if turn is None:  # it has ended: this arrival is a new request instead
                open_conversations.remove(conversation)
        if turn is None:
            prompt = lognormal(rng, 800, 0.6, 128, MAX_PROMPT)
            ids = system_prompt(rng, blocks, prompt)
            ids += blocks.new(-(-prompt // BLOCK) - len(ids))
            if rng.random() < CONVERSATION_SHARE:
                open_conversations.append(Conversation(prompt, ids, output))
        else:
            prompt, ids = turn
        entries.append(
            {
                "timestamp": round(t * 1000),
                "input_length": prompt,
                "output_length": output,
                "hash_ids": ids,
            }
        )
    return entries, bursts


def next_turn(
    rng: random.Random, blocks: BlockIds, conversation: Conversation, output: int
) -> tuple[int, list[int]] | None:
    """A conversation's next prompt and its ids (its last prompt's full blocks, then new ones),
    or None when the conversation has ended (MAX_TURNS, or the prompt would pass MAX_PROMPT)."""
    prompt = conversation.prompt + conversation.reply + lognormal(rng, 120, 0.7, 16, 600)
    if prompt > MAX_PROMPT or conversation.turns >= MAX_TURNS:
        return None
    kept = conversation.ids[: conversation.prompt // BLOCK]  # its partial last block changes
    ids = kept + blocks.new(-(-prompt // BLOCK) - len(kept))
    conversation.prompt, conversation.ids, conversation.reply = prompt, ids, output
    conversation.turns += 1
    return prompt, ids


def system_prompt(rng: random.Random, blocks: BlockIds, prompt: int) -> list[int]:
    """The ids of a system prompt that fits in `prompt` tokens (leaving room for a message),
    drawn by popularity among those that fit, or none."""
    if rng.random() >= SYSTEM_PROMPT_SHARE:
        return []
    fitting = [i for i, n in enumerate(SYSTEM_PROMPT_BLOCKS) if n * BLOCK < prompt]
    if not fitting:
        return []
    chosen = rng.choices(fitting, [SYSTEM_PROMPT_WEIGHTS[i] for i in fitting])[0]
    return list(blocks.system_prompts[chosen])


def burstgpt(rng: random.Random) -> tuple[list[str], int]:
    """BurstGPT rows: ChatGPT (80 %) or GPT-4, conversation (70 %) or API log; requests
    lognormal(600, 0.9) in [16, 3000], responses lognormal(100, 0.8) in [4, 256], and 3 % failed
    (Response tokens 0, as the original log has them). Times in seconds with 3 decimals."""
    times, bursts = mmpp_arrivals(rng)
    lines = ["Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"]
    for t in times:
        model = "ChatGPT" if rng.random() < 0.8 else "GPT-4"
        log = "Conversation log" if rng.random() < 0.7 else "API log"
        request = lognormal(rng, 600, 0.9, 16, MAX_PROMPT)
        response = 0 if rng.random() < 0.03 else lognormal(rng, 100, 0.8, 4, MAX_OUTPUT)
        lines.append(f"{t:.3f},{model},{request},{response},{request + response},{log}")
    return lines, bursts


AZURE_START = datetime.datetime(2023, 11, 16, 18, 15, 46)
AZURE_START_TICKS = 6805900  # the start's fraction of a second, in 100 ns ticks


def azure(rng: random.Random) -> tuple[list[str], int]:
    """Azure rows: ContextTokens lognormal(1000, 0.8) in [16, 3000], GeneratedTokens
    lognormal(48, 0.9) in [4, 256]; TIMESTAMP from 2023-11-16 18:15:46.6805900 on, with
    7 fractional digits (100 ns) as the 2023 traces write it."""
    times, bursts = mmpp_arrivals(rng)
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for t in times:
        ticks = AZURE_START_TICKS + round(t * 10_000_000)
        when = AZURE_START + datetime.timedelta(seconds=ticks // 10_000_000)
        stamp = f"{when:%Y-%m-%d %H:%M:%S}.{ticks % 10_000_000:07d}"
        context = lognormal(rng, 1000, 0.8, 16, MAX_PROMPT)
        generated = lognormal(rng, 48, 0.9, 4, MAX_OUTPUT)
        lines.append(f"{stamp},{context},{generated}")
    return lines, bursts


def main() -> None:
    default = os.path.join(ROOT, "vllm_load", "workload", "traces", "samples")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=default, help="the folder to write (default: %(default)s)")
    out = parser.parse_args().out
    os.makedirs(out, exist_ok=True)
    entries, mooncake_bursts = mooncake(random.Random(SEED))
    burstgpt_lines, burstgpt_bursts = burstgpt(random.Random(SEED + 1))
    azure_lines, azure_bursts = azure(random.Random(SEED + 2))
    written = {
        "mooncake_60s.jsonl": ([json.dumps(e) for e in entries], mooncake_bursts),
        "burstgpt_sample.csv": (burstgpt_lines, burstgpt_bursts),
        "azure_sample.csv": (azure_lines, azure_bursts),
    }
    for name, (lines, bursts) in written.items():
        path = os.path.join(out, name)
        with open(path, "w", encoding="utf-8", newline="\n") as fh:
            fh.writelines(line + "\n" for line in lines)
        trace = read_trace(path)
        count, seconds = len(trace.requests), trace.duration
        text = f"{path}: {count} requests over {seconds:.1f} s ({count / seconds:.1f}/s, "
        text += f"{bursts} bursts)"
        if trace.skipped:
            text += f", {trace.skipped} failed rows skipped"
        summary = reuse_summary(trace)
        if summary["blocks"]:
            text += f", {summary['reused_share']:.0%} of {summary['blocks']} blocks reused"
        print(text)


if __name__ == "__main__":
    main()
