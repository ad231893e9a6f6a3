"""Write the small datasets shipped in vllm_load/workload/data/: a ShareGPT JSON array
(`sample_sharegpt.json`, 150 conversations of 1 to 5 human/gpt turns) and JSONL prompts with
their output lengths (`sample_prompts.jsonl`, 100 entries).

The text is plain English sentences of words from a fixed list, lengths from a few words to a
few hundred; everything comes from one seeded generator, so a re-run writes the same bytes
(tests/workload/test_samples.py checks it). Re-run after changing this script, and commit both
files with it:

    python scripts/make_sample_dataset.py            # writes vllm_load/workload/data/
    python scripts/make_sample_dataset.py --out DIR  # writes elsewhere
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random

SEED = 20240611
CONVERSATIONS = 150
PROMPTS = 100

NOUNS = """system server request model token batch cache memory network queue client answer
question river mountain garden library window kitchen market harbor village forest engine
bridge station letter story planet ocean signal record report table chart budget project
team meeting plan street city school teacher student doctor music painting camera journey
weather season morning evening problem method result example reason""".split()
VERBS = """explains describes measures improves changes follows supports reduces builds opens
shows keeps finds moves holds checks starts carries brings watches reads writes tests
compares needs""".split()
ADJECTIVES = """small large quiet busy simple careful early late bright dark warm cold fast slow
clear long short new old useful steady gentle strong common""".split()
ADVERBS = "quickly slowly often rarely carefully usually clearly gently again together".split()
ASKS = [
    "Can you explain",
    "Please describe",
    "Tell me about",
    "Write a short note on",
    "Summarize",
    "What do you know about",
    "Give me three ideas for",
    "Compare",
]


def sentence(rng: random.Random) -> str:
    """One sentence of 6 to 14 words."""
    words = [
        "the",
        rng.choice(ADJECTIVES),
        rng.choice(NOUNS),
        rng.choice(VERBS),
        "the",
        rng.choice(NOUNS),
    ]
    target = rng.randint(6, 14)
    while len(words) < target:
        words += rng.choice(
            [
                ["and", "the", rng.choice(NOUNS)],
                [rng.choice(ADVERBS)],
                ["in", "the", rng.choice(ADJECTIVES), rng.choice(NOUNS)],
                ["with", "a", rng.choice(NOUNS)],
            ]
        )
    return " ".join(words).capitalize() + "."


def text(rng: random.Random, words: int) -> str:
    """Sentences until about `words` words, in paragraphs of up to five sentences."""
    paragraphs: list[list[str]] = [[]]
    count = 0
    while count < words:
        if len(paragraphs[-1]) == 5:
            paragraphs.append([])
        s = sentence(rng)
        paragraphs[-1].append(s)
        count += len(s.split())
    return "\n\n".join(" ".join(p) for p in paragraphs)


def length(rng: random.Random, median: float, most: int) -> int:
    """A word count: lognormal around `median`, from 3 to `most` (a long tail, as in chats)."""
    return max(3, min(most, round(math.exp(rng.gauss(math.log(median), 1.0)))))


def prompt(rng: random.Random, words: int) -> str:
    """A request: a short ask, then context when it is long."""
    lead = rng.choice(ASKS)
    ask = f"{lead} the {rng.choice(ADJECTIVES)} {rng.choice(NOUNS)}"
    ask += "?" if lead.startswith(("Can", "What")) else "."
    if words <= 8:
        return ask
    return f"{ask} {text(rng, words - len(ask.split()))}"


def sharegpt(rng: random.Random) -> list[dict]:
    entries = []
    for i in range(CONVERSATIONS):
        conversation = []
        for _ in range(rng.choice([1, 1, 1, 2, 2, 3, 3, 4, 5])):
            conversation.append({"from": "human", "value": prompt(rng, length(rng, 25, 350))})
            conversation.append({"from": "gpt", "value": text(rng, length(rng, 35, 400))})
        entries.append({"id": f"sample_{i:03d}", "conversations": conversation})
    return entries


def prompts(rng: random.Random) -> list[dict]:
    entries = []
    for i in range(PROMPTS):
        entry: dict = {"id": f"prompt_{i:03d}", "prompt": prompt(rng, length(rng, 40, 400))}
        entry["output_tokens"] = rng.choice([16, 32, 64, 128, 128, 256, 256, 512, 1024])
        entries.append(entry)
    return entries


def main() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    default = os.path.join(os.path.dirname(here), "vllm_load", "workload", "data")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=default, help="the folder to write (default: %(default)s)")
    out = parser.parse_args().out
    os.makedirs(out, exist_ok=True)
    rng = random.Random(SEED)
    # one entry per line: a readable diff when the script changes
    conversations = ",\n".join(json.dumps(e) for e in sharegpt(rng))
    with open(os.path.join(out, "sample_sharegpt.json"), "w", encoding="utf-8") as fh:
        fh.write(f"[\n{conversations}\n]\n")
    with open(os.path.join(out, "sample_prompts.jsonl"), "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(e) + "\n" for e in prompts(rng))


if __name__ == "__main__":
    main()
