"""Advice on the deployment around the server rather than a `vllm serve` flag: more load
processes for a client that fell behind, and for a disaggregated prefill/decode deployment the
instances' ratio or the KV link between them (`tune --advice` cannot carry these out)."""

from __future__ import annotations

import math

from .advice import Advice, Situation


def more_load_processes(s: Situation) -> tuple[Advice, ...]:
    """The client: more load processes."""
    return (
        Advice(
            "--workers",
            None,
            None,
            "more load processes: the client keeps up and the level's figures become the server's",
            "CPU cores for the client",
        ),
    )


def _grew(s: Situation, key: str) -> str:
    """`key`'s part of TTFT at the lowest level and here, in words (the verdict's evidence)."""
    ev = s.evidence
    return f"{ev.get(key + '_lowest', math.nan):,.1f} → {ev.get(key, math.nan):,.1f} ms"


def more_prefill(s: Situation) -> tuple[Advice, ...]:
    """The prefill side: a higher prefill:decode ratio."""
    return (
        Advice(
            "prefill:decode ratio",
            None,
            None,
            "add prefill instances (a higher P:D ratio, e.g. 1P1D → 2P1D, or move an instance from decode to prefill): the "
            f"prefill server's part of TTFT grew most ({_grew(s, 'prefill_ms')})",
            "a GPU per prefill instance added, or decode capacity given up",
        ),
    )


def more_decode(s: Situation) -> tuple[Advice, ...]:
    """The decode side: a lower prefill:decode ratio."""
    return (
        Advice(
            "prefill:decode ratio",
            None,
            None,
            "add decode instances (a lower P:D ratio, e.g. 1P1D → 1P2D, or move an instance from prefill to decode): the "
            f"decode server's queue and first step grew most ({_grew(s, 'first_decode_ms')})",
            "a GPU per decode instance added, or prefill capacity given up",
        ),
    )


def faster_kv_transfer(s: Situation) -> tuple[Advice, ...]:
    """The KV transfer: a faster link or fewer bytes; the ratio does not shorten a transfer."""
    gbps = s.evidence.get("kv_transfer_gbps", math.nan)
    return (
        Advice(
            "KV transfer",
            None,
            None,
            f"the transfer grew most ({_grew(s, 'kv_transfer_ms')}, {gbps:.3g} GB/s): a faster "
            "link between prefill and decode (RDMA or NVLink for NIXL's UCX backend), or fewer "
            "bytes per request (--kv-cache-dtype fp8 halves them); changing the prefill:decode "
            "ratio does not shorten a transfer the link holds back",
            "network hardware, or fp8 KV's accuracy",
        ),
    )
