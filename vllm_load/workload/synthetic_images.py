"""The images the built-in test sends (--images): each one distinct, made in microseconds.

Encoding a 512 x 512 JPEG takes milliseconds, and base64 of its 55 KB a tenth of one: too much
for a load process to spend per request. So each process encodes a pool of P random images once,
each cut into B bands that decode on their own, and every image it sends is a new combination of
bands (band b from pool image c_b), joined from parts encoded once, in base64 too. Any two images
sent differ in their pixels, not only in their bytes: vLLM finds an image in its multimodal
caches by a hash of its decoded pixels (older releases) or of its encoded bytes (newer ones), so
both must differ for no cache to flatter the test.

- JPEG: a restart marker every few MCUs (`restart_marker_blocks`). After a restart marker the
  entropy-coded data depends on nothing before it (the DC prediction restarts), and the pool's
  images share every header byte (same size, quality, subsampling and standard Huffman tables),
  so bands of different images join into a valid JPEG; the marker after band b is RST(b mod 8)
  in each of them alike.
- PNG: one IDAT chunk per band of rows, each band deflated on its own and ended byte-aligned
  (so bands join into one zlib stream), the stream's Adler-32 combined from the bands' and put
  in a last small IDAT chunk.

Every part but the last is padded to a multiple of 3 bytes, so the base64 of the parts joined is
their base64s joined: a JPEG band with 0xFF fill bytes before its marker (which decoders skip,
T.81 B.1.1.2), the JPEG header with a comment segment, a PNG band with empty stored deflate
blocks.

The k-th image of a process is combination k x an odd constant modulo P^B (a bijection), whose
base-P digits choose the bands: no combination repeats within P^B >= 2^32 images. Processes
draw their pools from seeds of their own.
"""

from __future__ import annotations

import base64
import io
import math
import random
import re
import struct
import zlib

from PIL import Image

from .images import FORMAT_MIME_TYPES, ImageSize

#: about this many bands per image: enough that a pool of 2 gives 2^32 combinations
TARGET_BANDS = 64
#: images of one process that are all distinct: at least 2^32
DISTINCT_BITS = 32
#: odd: k -> k * MIX mod P^B is a bijection, and consecutive images differ in many bands
MIX = 0x9E3779B97F4A7C15
JPEG_QUALITY = 75  # Pillow's default, as a client that saves a JPEG with it sends
_RESTART = re.compile(rb"\xff[\xd0-\xd7]")
_EMPTY_STORED = b"\x00\x00\x00\xff\xff"  # a deflate block, not the last, stored, empty


def pool_bits(bands: int) -> int:
    """log2 of the pool size that makes `bands` bands give 2^DISTINCT_BITS combinations."""
    return max(1, math.ceil(DISTINCT_BITS / bands))


def random_picture(size: ImageSize, rng: random.Random) -> Image.Image:
    """A smooth random field of colours (an 8 x 8 grid enlarged) under 20 % uniform noise: as a
    JPEG about the size of a photo (55 KB at 512 x 512), where pure noise takes three times
    that; no two of its bands alike."""
    w, h = size.width, size.height
    grid = Image.frombytes("RGB", (8, 8), rng.randbytes(8 * 8 * 3))
    smooth = grid.resize((w, h), Image.Resampling.BILINEAR)
    return Image.blend(smooth, Image.frombytes("RGB", (w, h), rng.randbytes(w * h * 3)), 0.2)


class JpegBands:
    """A pool of JPEGs with restart markers, cut at them into bands (module docstring):
    `header`, then `pool[b][c]`, band b of pool image c, each a multiple of 3 bytes long."""

    MCU = 16  # pixels per side of a 4:2:0 MCU

    def __init__(self, size: ImageSize, rng: random.Random) -> None:
        mcus = math.ceil(size.width / self.MCU) * math.ceil(size.height / self.MCU)
        interval = max(1, mcus // TARGET_BANDS)
        self.bands = math.ceil(mcus / interval)
        self.bits = pool_bits(self.bands)
        self.header = b""
        self.pool: list[list[bytes]] = [[] for _ in range(self.bands)]
        for _ in range(1 << self.bits):
            out = io.BytesIO()
            random_picture(size, rng).save(
                out,
                "JPEG",
                quality=JPEG_QUALITY,
                subsampling=2,  # 4:2:0, the usual
                restart_marker_blocks=interval,
            )
            header, bands = self._cut(out.getvalue())
            if self.header and header != self.header:
                raise RuntimeError("the pool's JPEG headers differ: their bands cannot be joined")
            self.header = header
            for b, band in enumerate(bands):
                self.pool[b].append(band)

    def _cut(self, data: bytes) -> tuple[bytes, list[bytes]]:
        """The bytes up to the scan's data, and the scan's bands, each with the marker after it
        (a restart marker, or the last band's end of image), all padded to multiples of 3."""
        at = 2  # after SOI
        while data[at + 1] != 0xDA:  # segments up to the start of scan
            at += 2 + int.from_bytes(data[at + 2 : at + 4], "big")
        start = at + 2 + int.from_bytes(data[at + 2 : at + 4], "big")
        if data[-2:] != b"\xff\xd9":
            raise RuntimeError("a pool JPEG does not end with its end-of-image marker")
        scan = data[start:-2]
        markers = [m.start() for m in _RESTART.finditer(scan)]
        if len(markers) != self.bands - 1:
            raise RuntimeError(
                f"a pool JPEG has {len(markers) + 1} restart intervals, not {self.bands}: this "
                "Pillow writes no restart markers (vllm-load needs Pillow 10.2 or later)"
            )
        edges = [0, *markers, len(scan)]
        bands = []
        for b in range(self.bands):
            data_part = scan[edges[b] + (2 if b else 0) : edges[b + 1]]
            marker = scan[edges[b + 1] : edges[b + 1] + 2] if b + 1 < self.bands else b"\xff\xd9"
            bands.append(data_part + b"\xff" * (-(len(data_part) + 2) % 3) + marker)
        # a comment segment (marker, length, 0-2 spaces) after SOI pads the header
        pad = -(start + 4) % 3
        comment = b"\xff\xfe" + (2 + pad).to_bytes(2, "big") + b" " * pad
        return data[:2] + comment + data[2:start], bands

    def tail(self, choices: list[int]) -> bytes:
        return b""


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def adler32_combine(first: int, second: int, second_length: int) -> int:
    """The Adler-32 of two byte strings joined, from theirs and the second's length (zlib's
    `adler32_combine`, which Python's zlib does not offer)."""
    base = 65521
    rem = second_length % base
    sum1 = first & 0xFFFF
    sum2 = (rem * sum1) % base
    sum1 += (second & 0xFFFF) + base - 1
    sum2 += (first >> 16) + (second >> 16) + base - rem
    sum1 -= base if sum1 >= base else 0
    sum1 -= base if sum1 >= base else 0
    sum2 -= 2 * base if sum2 >= 2 * base else 0
    sum2 -= base if sum2 >= base else 0
    return sum1 | (sum2 << 16)


def _padded_idat(deflated: bytes) -> bytes:
    """An IDAT chunk of a byte-aligned piece of a deflate stream, with as many empty stored
    blocks (5 bytes each) as make the chunk a multiple of 3 bytes."""
    blocks = {0: 0, 1: 1, 2: 2}[(12 + len(deflated)) % 3]  # each block adds 2 (mod 3)
    return _chunk(b"IDAT", deflated + _EMPTY_STORED * blocks)


class PngBands:
    """A pool of 8-bit RGB PNGs whose zlib streams are cut into an IDAT chunk per band of rows:
    `header`, then `pool[b][c]`, each a multiple of 3 bytes long, then `tail(choices)`."""

    def __init__(self, size: ImageSize, rng: random.Random) -> None:
        self.bands = min(size.height, TARGET_BANDS)
        self.bits = pool_bits(self.bands)
        rows = [size.height * b // self.bands for b in range(self.bands + 1)]
        stride = size.width * 3
        ihdr = struct.pack(">IIBBBBB", size.width, size.height, 8, 2, 0, 0, 0)
        self.header = b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _padded_idat(b"\x78\x01")
        # each scanline is its filter type (0: none) and its pixels
        self.lengths = [(rows[b + 1] - rows[b]) * (stride + 1) for b in range(self.bands)]
        self.pool: list[list[bytes]] = [[] for _ in range(self.bands)]
        self.adlers: list[list[int]] = [[] for _ in range(self.bands)]
        for _ in range(1 << self.bits):
            pixels = random_picture(size, rng).tobytes()
            for b in range(self.bands):
                raw = b"".join(
                    b"\x00" + pixels[row * stride : (row + 1) * stride]
                    for row in range(rows[b], rows[b + 1])
                )
                deflate = zlib.compressobj(6, zlib.DEFLATED, -15)  # raw: no back-references
                self.pool[b].append(
                    _padded_idat(deflate.compress(raw) + deflate.flush(zlib.Z_FULL_FLUSH))
                )
                self.adlers[b].append(zlib.adler32(raw))
        self.end = _chunk(b"IEND", b"")

    def tail(self, choices: list[int]) -> bytes:
        """The stream's last, empty block (final, fixed codes) and its Adler-32, then IEND."""
        checksum = 1  # the Adler-32 of nothing
        for b, c in enumerate(choices):
            checksum = adler32_combine(checksum, self.adlers[b][c], self.lengths[b])
        return _chunk(b"IDAT", b"\x03\x00" + struct.pack(">I", checksum)) + self.end


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


class SyntheticImages:
    """One process's distinct images of one size and format (module docstring): `next_urls(n)`
    gives n of them as `data:` URLs and the bytes the images take (before base64)."""

    def __init__(self, size: ImageSize, image_format: str, seed: int) -> None:
        self.codec = (
            JpegBands(size, random.Random(seed))
            if image_format == "jpeg"
            else PngBands(size, random.Random(seed))
        )
        codec = self.codec
        self._prefix = f"data:{FORMAT_MIME_TYPES[image_format]};base64," + _b64(codec.header)
        self._pool64 = [[_b64(part) for part in choices] for choices in codec.pool]
        self._sizes = [[len(part) for part in choices] for choices in codec.pool]
        self._digit = (1 << codec.bits) - 1
        self._mask = (1 << (codec.bits * codec.bands)) - 1
        self._made = 0

    def choices(self, k: int) -> list[int]:
        """Which pool picture each band of the process's k-th image (from 0) comes from."""
        index = (k * MIX) & self._mask
        bits, digit = self.codec.bits, self._digit
        return [(index >> (b * bits)) & digit for b in range(self.codec.bands)]

    def _choices(self) -> list[int]:
        self._made += 1
        return self.choices(self._made - 1)

    def next_image(self) -> bytes:
        choices = self._choices()
        pool = self.codec.pool
        middle = b"".join([pool[b][c] for b, c in enumerate(choices)])
        return self.codec.header + middle + self.codec.tail(choices)

    def next_url(self) -> tuple[str, int]:
        """The next image as a `data:` URL, and its size in bytes."""
        choices = self._choices()
        pool64, sizes = self._pool64, self._sizes
        tail = self.codec.tail(choices)
        url = self._prefix + "".join([pool64[b][c] for b, c in enumerate(choices)]) + _b64(tail)
        size = len(self.codec.header) + sum([sizes[b][c] for b, c in enumerate(choices)])
        return url, size + len(tail)

    def next_urls(self, n: int) -> tuple[list[str], int]:
        urls, total = [], 0
        for _ in range(n):
            url, size = self.next_url()
            urls.append(url)
            total += size
        return urls, total
