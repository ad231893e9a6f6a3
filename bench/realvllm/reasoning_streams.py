"""Reading one stream of a reasoning model two ways (bench/realvllm/reasoning.py's probes): as the
server says it generated it (its usage, and the token ids vLLM sends with `return_token_ids`) and
as vllm-load's meter reads the same bytes (`SseMeter`, then `split_completion` as
`vllm_load/client/request.py` calls it); and the comparison of the two. Pure functions."""

from __future__ import annotations

import json

from vllm_load.client.sse import SseMeter, split_completion

#: ways of cutting a stream's bytes into reads: the meter must read each alike
PIECES = ("whole", "per_event", "bytes_97")


def sse_events(raw: bytes) -> list[dict]:
    """The JSON payloads of a stream's `data:` events, in order (without `[DONE]`)."""
    out = []
    for event in raw.split(b"\n\n"):
        for line in event.splitlines():
            if line.startswith(b"data:") and line[5:].strip() != b"[DONE]":
                out.append(json.loads(line[5:]))
    return out


def server_view(events: list[dict], end_id: int) -> dict:
    """What the server says about one stream: its usage, and its token ids split at the first
    `</think>` (reasoning before it; the marker; the answer after it), with the texts."""
    ids: list[int] = []
    reasoning_text, answer_text = [], []
    # events by delta: reasoning text (maybe empty), answer text, empty answer text (a held-back
    # character), no text at all (`{}`: sent only with return_token_ids), the role announcement
    chunks = {"reasoning": 0, "content": 0, "content_empty": 0, "no_text": 0, "role": 0}
    usage = None
    for ev in events:
        usage = ev.get("usage") or usage
        for ch in ev.get("choices") or ():
            ids += ch.get("token_ids") or []
            delta = ch.get("delta") or {}
            reasoning = delta.get("reasoning", delta.get("reasoning_content"))
            content = delta.get("content")
            if "role" in delta:
                chunks["role"] += 1
            elif isinstance(content, str) and content:
                chunks["content"] += 1
            elif isinstance(reasoning, str):
                chunks["reasoning"] += 1
            elif isinstance(content, str):
                chunks["content_empty"] += 1
            elif ch.get("token_ids"):
                chunks["no_text"] += 1
            if isinstance(reasoning, str):
                reasoning_text.append(reasoning)
            if isinstance(delta.get("content"), str):
                answer_text.append(delta["content"])
    end = ids.index(end_id) if end_id in ids else len(ids)
    details = (usage or {}).get("completion_tokens_details") or {}
    return {
        "completion_tokens": (usage or {}).get("completion_tokens"),
        "usage_reasoning_tokens": details.get("reasoning_tokens"),
        "token_ids": len(ids),
        "ids_reasoning": end,
        "ids_think_end": ids.count(end_id),
        "ids_answer": len(ids) - end,
        "chunks": chunks,
        "reasoning_text": "".join(reasoning_text),
        "answer_text": "".join(answer_text),
    }


def _feed(raw: bytes, how: str) -> SseMeter:
    meter = SseMeter(chat=True)
    buf = bytearray()
    if how == "whole":
        pieces = [raw]
    elif how == "per_event":
        pieces = [e + b"\n\n" for e in raw.split(b"\n\n") if e]
    else:
        pieces = [raw[i : i + 97] for i in range(0, len(raw), 97)]
    for i, piece in enumerate(pieces):
        buf += piece
        meter.consume(buf, float(i))
    return meter


def client_view(raw: bytes) -> dict:
    """vllm-load's reading of the same bytes, as `request.py` records it: per way of cutting the
    bytes into reads, the chunks and the first answer chunk; the split by usage and counted."""
    meters = {how: _feed(raw, how) for how in PIECES}
    seen = {(len(m.chunk_times), m.answer_at, m.done) for m in meters.values()}
    m = meters["whole"]
    n = len(m.chunk_times)
    reasoning_chunks = n if m.answer_at is None else m.answer_at
    usage = m.usage or {}
    completion = usage.get("completion_tokens")
    no_details = {k: v for k, v in usage.items() if k != "completion_tokens_details"}
    return {
        "n_chunks": n,
        "answer_at": m.answer_at,
        "done": m.done,
        "reads_agree": len(seen) == 1,
        "by_usage": split_completion(usage, completion, reasoning_chunks, n),
        "counted": split_completion(no_details, completion, reasoning_chunks, n),
    }


def compare_probe(server: dict, client: dict) -> dict:
    """The client's split (as recorded; and by its chunks alone) against the server's usage and
    against the server's token ids (reasoning: the tokens before the first `</think>`)."""
    served, ids_reasoning = server["usage_reasoning_tokens"], server["ids_reasoning"]
    completion = server["completion_tokens"]
    split = tuple(client["by_usage"][:2])
    by_usage = None if served is None else (served, completion - served)
    by_ids = (ids_reasoning, completion - ids_reasoning)
    # vLLM's known miscount (vllm#49743): 0 for a thinking the chat template opened
    miscount = served == 0 and ids_reasoning > 0
    return {
        "client_equals_usage": split == by_usage,
        "client_equals_ids": split == by_ids,
        "counted_equals_usage": tuple(client["counted"][:2]) == by_usage,
        "counted_equals_ids": tuple(client["counted"][:2]) == by_ids,
        "usage_equals_ids": by_usage == by_ids,
        "usage_zero_miscount": miscount,
        # the acceptance: the server's usage; where that is the known 0, its token ids
        "client_right": split == (by_ids if miscount else by_usage),
        "reads_agree": client["reads_agree"],
    }
