"""What --images costs the client per request: the built-in test's chat body with N generated
images, against the same body without images, and against encoding each image anew with Pillow.

A request's body is built in the user's greenlet, between two requests, so its cost delays the
next one and takes a load process's CPU from reading streams. This bench builds bodies the way
`ClosedLoopUser.send_request` does (a 2048-token text, `user_content`, `orjson.dumps`) with
`SyntheticImages` (a pool encoded once, each image joined from bands: `workload/synthetic_images`),
and with one picture stamped with a counter in its first pixels, then encoded and base64'd per
image (the other way to make each image distinct).
Pure CPU, no network.

    python bench/image_cost.py                               # 2 JPEGs of 512x512, best of 5
    python bench/image_cost.py --format png --size 1024x1024
    python bench/image_cost.py --quick                       # smoke test
"""

from __future__ import annotations

import argparse
import base64
import io
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import orjson  # noqa: E402

from vllm_load.workload.images import (  # noqa: E402
    FORMAT_MIME_TYPES,
    parse_image_size,
    user_content,
)
from vllm_load.workload.synthetic_images import (  # noqa: E402
    JPEG_QUALITY,
    SyntheticImages,
    random_picture,
)

TEXT = " the" * 2048


def body(urls: list[str]) -> bytes:
    message = {"role": "user", "content": user_content(TEXT, urls)}
    return orjson.dumps({"model": "m", "messages": [message], "max_tokens": 512, "stream": True})


def best_us(make, repeat: int, rounds: int) -> float:
    """The fastest of `rounds` rounds, in µs per call of `make`."""
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(repeat):
            make()
        best = min(best, (time.perf_counter() - start) / repeat)
    return best * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=2)
    parser.add_argument("--size", default="512x512")
    parser.add_argument("--format", choices=("jpeg", "png"), default="jpeg")
    parser.add_argument("--repeat", type=int, default=200, help="bodies per round")
    parser.add_argument("--quick", action="store_true", help="a smoke test: few bodies")
    args = parser.parse_args()
    size = parse_image_size(args.size)
    repeat, rounds = (5, 1) if args.quick else (args.repeat, 5)

    start = time.perf_counter()
    images = SyntheticImages(size, args.format, seed=1)
    pool_ms = (time.perf_counter() - start) * 1e3
    picture = random_picture(size, random.Random(2))
    mime = FORMAT_MIME_TYPES[args.format]
    stamps = iter(range(1 << 62))

    def encoded_anew() -> bytes:
        urls = []
        for _ in range(args.images):
            out = io.BytesIO()
            stamp = next(stamps)
            for x in range(3):  # the counter in the first pixels' colours
                picture.putpixel(
                    (x, 0), tuple((stamp >> (8 * (3 * x + c))) & 255 for c in range(3))
                )
            if args.format == "jpeg":
                picture.save(out, "JPEG", quality=JPEG_QUALITY)
            else:
                picture.save(out, "PNG")
            urls.append(f"data:{mime};base64,{base64.b64encode(out.getvalue()).decode()}")
        return body(urls)

    plain = best_us(lambda: body([]), repeat, rounds)
    pooled = best_us(lambda: body(images.next_urls(args.images)[0]), repeat, rounds)
    anew = best_us(encoded_anew, max(1, repeat // 20), rounds)
    _, image_bytes = images.next_urls(args.images)
    print(f"{args.images} {args.format} image(s) of {size}: {image_bytes:,} bytes per request")
    print(
        f"pool: {1 << images.codec.bits} images in {images.codec.bands} bands, made in {pool_ms:.0f} ms"
    )
    print(f"body without images:              {plain:10.1f} µs")
    print(f"body, images from the pool:       {pooled:10.1f} µs  (+{pooled - plain:.1f} µs)")
    print(f"body, images stamped and encoded: {anew:10.1f} µs  (+{anew - plain:.1f} µs)")
    ratio = (anew - plain) / max(pooled - plain, 1e-9)
    print(f"the images' cost from the pool:   {ratio:10.0f}x less than stamped and encoded")


if __name__ == "__main__":
    main()
