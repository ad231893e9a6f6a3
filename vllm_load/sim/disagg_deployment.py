"""`vllm-load sim --disagg`: a disaggregated prefill/decode deployment, a process per server.

Three HTTP servers, each a process of its own as a deployment's are (`cli.run_disaggregated`:
one can be killed alone), like vLLM's NixlConnector examples: a prefill instance and a decode
instance (each a `SimServer` with an engine and a /metrics of its own) and, on --port, a proxy
that routes every request as vLLM's disaggregated proxy example
(examples/online_serving/disaggregated_serving/…toy_proxy_server.py) does: first to the prefill
instance with `max_tokens` 1, not streamed, and `kv_transfer_params` {"do_remote_decode": true};
then the original request, with the `kv_transfer_params` the prefill instance answered, to the
decode instance, whose response goes back to the client as it comes. The proxy has no /metrics
(neither has vLLM's).

The decode instance reads the request's KV blocks over one link (`KvLink`): a transfer waits
for the link to be free, then takes `--kv-transfer-cost` per block; the request then joins the
decode engine with its prompt computed but for the last token, whose step yields the first
token it streams (as vLLM's decode instance does). Its /metrics has the NIXL connector's
`vllm:nixl_*` families, with a transfer's time from its post to its end (waiting for the link
included, as NIXL's telemetry counts a transfer's duration), its bytes and its descriptors (one
per block: the simulator has no layers). A request without `kv_transfer_params` is computed
locally, prompt and all. Not modelled: the prefill instance holding the blocks until they are
read (it frees them when it answers), several instances per side.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence as Ids
from dataclasses import replace

import orjson
from aiohttp import ClientError, ClientSession, ClientTimeout, web

from .backends import EngineBackend, TokenSource
from .config import Disaggregation, SimConfig
from .counters import TransferCounts
from .faults import reset_connection

PREFILL, DECODE = "prefill", "decode"
#: what the proxy adds to the request it sends the prefill instance
REMOTE_DECODE = {
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}


def instance_configs(config: SimConfig) -> tuple[SimConfig, SimConfig]:
    """The prefill and decode instances' configurations of a --disagg `config`."""
    disagg = config.disagg
    assert disagg is not None  # only a --disagg configuration has instances
    prefill = replace(config, port=disagg.prefill_port, kv_role=PREFILL)
    decode = replace(config, port=disagg.decode_port, kv_role=DECODE)
    return prefill, decode


def transfer_params(config: SimConfig, block_ids: int) -> dict:
    """The `kv_transfer_params` a prefill instance answers (NixlConnector's keys)."""
    return {
        "do_remote_prefill": True,
        "do_remote_decode": False,
        "remote_engine_id": f"sim-prefill-{config.port}",
        "remote_block_ids": list(range(block_ids)),
        "remote_host": config.host,
        "remote_port": config.port,
    }


class KvLink:
    """The link the decode instance reads KV blocks over: one transfer at a time, each
    `seconds_per_block` per block (time scale applied), counted in `counts`."""

    def __init__(self, disagg: Disaggregation, time_scale: float, counts: TransferCounts) -> None:
        self.per_block = disagg.seconds_per_block * time_scale
        self.bytes_per_block = disagg.bytes_per_block
        self.counts = counts
        self.free_at = 0.0

    async def transfer(self, blocks: int) -> None:
        """Read `blocks` blocks: wait for the link, then for the transfer itself."""
        loop = asyncio.get_running_loop()
        posted = loop.time()
        start = max(posted, self.free_at)
        self.free_at = end = start + blocks * self.per_block
        await asyncio.sleep(end - posted)
        self.counts.observe(end - posted, blocks * self.bytes_per_block, blocks)


class RemoteKvSource:
    """A decode instance's request whose prompt a prefill instance computed: its KV blocks are
    read over the link first, then it joins the engine with them (`remote_tokens`)."""

    def __init__(
        self,
        backend: EngineBackend,
        link: KvLink,
        block_size: int,
        prompt: int,
        length: int,
        arrival: float,
        prompt_ids: Ids[int] | None,
    ) -> None:
        self._backend, self._link = backend, link
        self._inner: TokenSource | None = None
        blocks = -(-max(prompt - 1, 0) // block_size)
        self._ready = asyncio.ensure_future(self._join(blocks, prompt, length, arrival, prompt_ids))

    async def _join(self, blocks, prompt, length, arrival, prompt_ids) -> None:
        await self._link.transfer(blocks)
        self._inner = self._backend.open(prompt, length, arrival, prompt_ids, prompt - 1)

    @property
    def cached_tokens(self) -> int:
        return self._inner.cached_tokens if self._inner is not None else 0

    async def wait(self, want: int) -> int:
        await self._ready
        assert self._inner is not None  # _join set it
        return await self._inner.wait(want)

    def close(self) -> None:
        if self._inner is not None:
            self._inner.close()
        else:
            self._ready.cancel()


def prefill_request(asked: dict) -> dict:
    """What the proxy sends the prefill instance: one token, not streamed, remote decode."""
    body = {k: v for k, v in asked.items() if k not in ("stream_options", "min_tokens")}
    body.update(max_tokens=1, stream=False, kv_transfer_params=REMOTE_DECODE)
    if "max_completion_tokens" in body:
        body["max_completion_tokens"] = 1
    return body


class Proxy:
    """The proxy on --port: generation to prefill then decode; everything else to decode."""

    def __init__(self, prefill_url: str, decode_url: str) -> None:
        self.prefill_url, self.decode_url = prefill_url, decode_url
        self.session: ClientSession | None = None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.on_startup.append(self._open)
        app.on_cleanup.append(self._close)
        app.router.add_post("/v1/chat/completions", self.generate)
        app.router.add_post("/v1/completions", self.generate)
        for path in ("/health", "/version", "/v1/models"):
            app.router.add_get(path, self.forward)
        for path in ("/tokenize", "/detokenize"):
            app.router.add_post(path, self.forward)
        return app

    async def _open(self, app: web.Application) -> None:
        self.session = ClientSession(timeout=ClientTimeout(total=None))

    async def _close(self, app: web.Application) -> None:
        if self.session is not None:
            await self.session.close()

    async def forward(self, request: web.Request) -> web.Response:
        assert self.session is not None  # opened at start-up
        try:
            async with self.session.request(
                request.method, self.decode_url + request.path, data=await request.read()
            ) as r:
                body = await r.read()
                return web.Response(body=body, status=r.status, content_type=r.content_type)
        except ClientError as e:
            return unreachable(DECODE, e)

    async def generate(self, request: web.Request) -> web.StreamResponse:
        assert self.session is not None  # opened at start-up
        raw = await request.read()
        try:
            asked = orjson.loads(raw)
        except orjson.JSONDecodeError:
            asked = None
        if not isinstance(asked, dict):  # the decode instance answers what is wrong with it
            return await self.forward(request)
        try:
            async with self.session.post(
                self.prefill_url + request.path, data=orjson.dumps(prefill_request(asked))
            ) as r:
                answer = await r.read()
                if r.status != 200:
                    return web.Response(body=answer, status=r.status, content_type=r.content_type)
        except ClientError as e:
            return unreachable(PREFILL, e)
        params = orjson.loads(answer).get("kv_transfer_params")
        decode = orjson.dumps({**asked, "kv_transfer_params": params})
        response = web.StreamResponse()
        try:
            async with self.session.post(self.decode_url + request.path, data=decode) as r:
                response.set_status(r.status)
                response.content_type = r.content_type
                await response.prepare(request)
                async for chunk in r.content.iter_any():
                    await response.write(chunk)
        except ClientError as e:
            if not response.prepared:
                return unreachable(DECODE, e)
            reset_connection(
                request
            )  # the decode instance went away mid-response: so does the stream
            return response
        await response.write_eof()
        return response


def unreachable(instance: str, error: Exception) -> web.Response:
    """The proxy's answer where an instance did not answer (stopped, killed): 502 with OpenAI's
    error JSON naming it, rather than aiohttp's 500 and a traceback per request."""
    message = f"the {instance} instance did not answer: {error}"
    body = {"error": {"message": message, "type": "BadGatewayError", "param": None, "code": 502}}
    return web.json_response(body, status=502)
