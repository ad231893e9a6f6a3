"""The simulated vLLM OpenAI-compatible server: aiohttp routes over a timing backend.

The generation handlers are the hot path: a request is parsed with orjson, its prompt counted
by the tokenizer, its output planned (length, end reason, text), and its response written from
byte templates (`ResponseRenderer`); tokens that became available together go out in one write.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import time

import orjson
from aiohttp import web
from aiohttp.http_writer import StreamWriter

from ..tokenization.choose import load_tokenizer
from .backends import Backend, EchoBackend, EngineBackend, FixedLatencyBackend, TokenSource
from .config import IMITATED_VLLM, SimConfig
from .counters import ServerStats, TransferCounts
from .dcgm_exporter import DCGM_PATH, SimulatedGpu
from .disagg_deployment import DECODE, PREFILL, KvLink, RemoteKvSource, transfer_params
from .exposition import MetricsExporter, cache_config_labels
from .faults import (
    STREAM_STRIKES,
    Fault,
    FaultPlan,
    error_response,
    faulted_body,
    open_source,
    strike,
)
from .output import OutputPlan, OutputPlanner, OutputVocabulary
from .protocol import (
    ApiError,
    ApiLimits,
    GenerationRequest,
    detokenize_answer,
    error_body,
    parse_generation,
    parse_json,
    tokenize_answer,
)
from .responses import BodyWriter, ResponseRenderer, model_card
from .tool_replies import TOOL_CALLS, ToolCaller, read_offer
from .trace import TraceRecord, TraceWriter

_DONE = b"data: [DONE]\n\n"
_SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
_JSON = "application/json"


def make_backend(config: SimConfig, stats: ServerStats) -> Backend:
    if config.mode == "echo":
        return EchoBackend(stats)
    if config.mode == "fixed":
        assert config.fixed is not None
        return FixedLatencyBackend(config.fixed, stats)
    return EngineBackend(config.engine, stats, config.output.seed)


def simulated_gpu(config: SimConfig, backend: Backend) -> SimulatedGpu | None:
    """--dcgm's GPU, following the engine (build_config allows --dcgm in engine mode only)."""
    if config.gpu is None or not isinstance(backend, EngineBackend):
        return None
    engine = backend.engine
    # the engine's steps are timed on asyncio's loop clock, which is time.monotonic
    return SimulatedGpu(
        config.gpu,
        engine.busy_seconds,
        lambda: engine.occupancy().kv_cache_usage,
        time.monotonic,
        config.port,
    )


def _error(e: ApiError) -> web.Response:
    return web.Response(body=e.body(), status=e.status, content_type=_JSON)


class SimServer:
    """One simulator process: tokenizer, timing backend, counters, and the HTTP routes."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.tokenizer = load_tokenizer(config.tokenizer)
        speculating = config.engine.speculation.tokens if config.mode == "engine" else 0
        self.stats = ServerStats(config.engine.max_model_len, speculating)
        self.backend = make_backend(config, self.stats)
        self.vocab = OutputVocabulary(self.tokenizer, config.output.seed)
        self.planner = OutputPlanner(config.output.eos_probability, config.output.seed)
        self.limits = ApiLimits(
            config.served_model_name, config.engine.max_model_len, config.image_tokens
        )
        self.model_json = orjson.dumps(config.served_model_name)
        kv_cache = cache_config_labels(config.engine) if config.mode == "engine" else None
        self.exporter = MetricsExporter(
            self.stats, self.backend.occupancy, config.served_model_name, kv_cache
        )
        self.created = int(time.time())
        self._ids = itertools.count()
        self._id_prefix = secrets.token_hex(12)
        self._tokens_per_chunk = max(1, config.output.tokens_per_chunk)
        self.faults = FaultPlan(config.faults)
        self.trace = TraceWriter(config.trace) if config.trace else None
        self._prompt_details = config.enable_prompt_tokens_details
        self._reasoning = config.reasoning
        self._reasoning_renderer = config.reasoning if config.reasoning.enabled else None
        self.gpu = simulated_gpu(config, self.backend)  # --dcgm: the engine's GPU, simulated
        self.link: KvLink | None = None  # a --disagg decode instance's KV reads
        if config.kv_role == DECODE and config.disagg is not None:
            self.stats.kv_transfer = TransferCounts()
            self.link = KvLink(config.disagg, config.engine.time_scale, self.stats.kv_transfer)
        self.tool_caller = ToolCaller(config.output.tool_call_share, config.output.seed)

    def app(self) -> web.Application:
        middlewares = [self._auth_middleware()] if self.config.api_key else []
        app = web.Application(middlewares=middlewares, client_max_size=64 * 1024 * 1024)
        app.router.add_get("/health", self.health)
        app.router.add_get("/version", self.version)
        if self.config.metrics_endpoint:
            app.router.add_get("/metrics", self.metrics)
        if self.gpu is not None:
            app.router.add_get(DCGM_PATH, self.dcgm_metrics)
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/v1/chat/completions", self.chat_completions)
        app.router.add_post("/v1/completions", self.completions)
        if self.config.tokenize_endpoint:
            app.router.add_post("/tokenize", self.tokenize)
            app.router.add_post("/detokenize", self.detokenize)
        return app

    def _auth_middleware(self):
        expected = f"Bearer {self.config.api_key}"

        @web.middleware
        async def auth(request: web.Request, handler):
            # like vLLM: only the /v1 API needs the key; health, metrics and tokenize do not
            if request.path.startswith("/v1") and request.headers.get("Authorization") != expected:
                return web.Response(
                    body=error_body(401, "Unauthorized"), status=401, content_type=_JSON
                )
            return await handler(request)

        return auth

    # --- small endpoints ------------------------------------------------------------------

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def version(self, request: web.Request) -> web.Response:
        # vLLM's answer, with a local version segment that says it is the simulator
        body = orjson.dumps({"version": f"{IMITATED_VLLM}+sim"})
        return web.Response(body=body, content_type=_JSON)

    async def metrics(self, request: web.Request) -> web.Response:
        body, content_type = self.exporter.render()
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def dcgm_metrics(self, request: web.Request) -> web.Response:
        assert self.gpu is not None  # the route exists only with it
        return web.Response(body=self.gpu.render(), content_type="text/plain")

    async def models(self, request: web.Request) -> web.Response:
        name = self.config.served_model_name
        root = getattr(self.tokenizer, "path", None) or name
        card = model_card(name, root, self.created, self.limits.max_model_len, self._id_prefix)
        return web.Response(body=card, content_type=_JSON)

    async def tokenize(self, request: web.Request) -> web.Response:
        try:
            answer = tokenize_answer(parse_json(await request.read()), self.limits, self.tokenizer)
        except ApiError as e:
            return _error(e)
        return web.Response(body=orjson.dumps(answer), content_type=_JSON)

    async def detokenize(self, request: web.Request) -> web.Response:
        try:
            answer = detokenize_answer(
                parse_json(await request.read()), self.limits, self.tokenizer
            )
        except ApiError as e:
            return _error(e)
        return web.Response(body=orjson.dumps(answer), content_type=_JSON)

    # --- generation -----------------------------------------------------------------------

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=True)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=False)

    async def _generate(self, request: web.Request, chat: bool) -> web.StreamResponse:
        loop = asyncio.get_running_loop()
        started = loop.time()
        received = time.time()
        try:
            asked = parse_json(await request.read())
            req = parse_generation(
                asked, chat, self.limits, self.tokenizer, self.backend.wants_prompt_ids
            )
            offer = read_offer(asked) if chat else None
            called = self.tool_caller.decide(offer)
        except ApiError as e:
            return _error(e)
        fault = self.faults.draw()
        if fault is not None and fault.kind == "error":
            return error_response(self.config.faults.error_status)
        plan = self.planner.plan(
            req.max_tokens,
            req.min_tokens,
            req.ignore_eos,
            req.seed,
            req.temperature,
            req.prompt_key,
            self._reasoning.tokens if chat and called is None else 0,
        )
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{self._id_prefix}{next(self._ids):08x}"
        plan = self.tool_caller.attach(plan, offer, called, rid, self.vocab)
        renderer = ResponseRenderer(
            chat, rid, self.limits.model, self.model_json, reasoning=self._reasoning_renderer
        )
        # the clock starts when the handler began, so reading and parsing the body is inside TTFT
        source = self._source(asked, fault, req, plan.length, started)
        completed = False
        try:
            if req.stream:
                response = web.StreamResponse(headers=_SSE_HEADERS)
                tracer, trace = self.trace, None
                if tracer is not None:
                    trace = TraceRecord(
                        request.headers.get("X-Request-Id") or rid, received, [], 0.0
                    )
                completed = await self._stream(
                    request, response, req, plan, renderer, source, fault, trace
                )
                if completed and tracer is not None and trace is not None:
                    trace.cached_tokens = source.cached_tokens
                    tracer.write(trace)
                return response
            await source.wait(plan.length)
            thought, text_total = plan.reasoning_tokens, plan.text_tokens
            body = renderer.full(
                self.vocab.text(plan.offset, thought, text_total),
                plan.finish_reason,
                req.prompt_tokens,
                plan.length,
                self._cached(source),
                self.vocab.text(plan.offset, 0, min(thought, text_total)),
                thought,
                plan.tool_call.message() if plan.tool_call is not None else None,
            )
            if fault is not None and fault.kind != "slow_first_token":
                return await faulted_body(fault, request, body)
            if self.config.kv_role == PREFILL and asked.get("kv_transfer_params"):
                blocks = -(-req.prompt_tokens // self.config.engine.block_size)
                params = transfer_params(self.config, blocks)
                body = orjson.dumps({**orjson.loads(body), "kv_transfer_params": params})
            completed = True
            return web.Response(body=body, content_type=_JSON)
        finally:
            source.close()
            if completed:
                self.stats.requests_ok[plan.finish_reason] += 1
                self.stats.e2e.observe(loop.time() - started)
            else:  # the client left (or the handler was cancelled) before the end
                self.stats.requests_ok["abort"] += 1

    def _source(
        self, asked: dict, fault: Fault | None, req: GenerationRequest, length: int, started: float
    ) -> TokenSource:
        """The request's tokens: on a --disagg decode instance, a request a prefill instance
        computed reads its KV blocks first (disagg_deployment.py); any other as the backend makes them."""
        backend = self.backend
        if self.link is not None and asked.get("kv_transfer_params"):
            assert isinstance(backend, EngineBackend)  # --disagg is engine mode only
            block_size = self.config.engine.block_size
            return RemoteKvSource(
                backend, self.link, block_size, req.prompt_tokens, length, started, req.prompt_ids
            )
        return open_source(
            fault, backend, req.prompt_tokens, length, started, req.stream, req.prompt_ids
        )

    def _cached(self, source: TokenSource) -> int | None:
        """The cached tokens the usage reports: only with --enable-prompt-tokens-details."""
        return source.cached_tokens if self._prompt_details else None

    async def _stream(
        self,
        request: web.Request,
        response: web.StreamResponse,
        req: GenerationRequest,
        plan: OutputPlan,
        renderer: ResponseRenderer,
        source: TokenSource,
        fault: Fault | None,
        trace: TraceRecord | None,
    ) -> bool:
        """Write the SSE response; False if the client went away (or a fault ended it) first."""
        try:
            await self._write_stream(request, response, req, plan, renderer, source, fault, trace)
            return True
        except ConnectionError:
            # aiohttp finishes a response to a closed connection quietly; raising would log a traceback
            return False

    async def _write_stream(
        self,
        request: web.Request,
        response: web.StreamResponse,
        req: GenerationRequest,
        plan: OutputPlan,
        renderer: ResponseRenderer,
        source: TokenSource,
        fault: Fault | None,
        trace: TraceRecord | None,
    ) -> None:
        """`trace`, when given, gets the wall-clock time each token and [DONE] were written
        (--trace); a plan's `tool_call` writes its tokens as that call's (`tool_replies.py`)."""
        writer = await response.prepare(request)
        assert isinstance(writer, StreamWriter)  # what prepare() gives a fresh response
        body = BodyWriter(request.transport, writer.chunked)
        vocab, offset = self.vocab, plan.offset
        total, text_total, finish = plan.length, plan.text_tokens, plan.finish_reason
        per_chunk = self._tokens_per_chunk
        thought = plan.reasoning_tokens  # tokens [0, thought) are reasoning, the rest the answer
        call = plan.tool_call
        sent = 0

        def emit(got: int) -> bool:
            """Write the tokens up to `got`; True when the connection's buffer wants a drain."""
            nonlocal sent
            parts = [renderer.role_chunk()] if sent == 0 and req.chat else []
            before = sent
            while sent < got:
                # the first token goes alone (TTFT is not delayed), then `per_chunk` at a time
                end = 1 if sent == 0 else min(got, sent + per_chunk)
                if 1 < end < total and end - sent < per_chunk:
                    # a part of a chunk (an engine step that made several tokens, a late wake-up)
                    # waits for the rest: every chunk but the last carries `per_chunk` tokens
                    break
                last = finish if end == total else None
                if call is not None:
                    parts.append(renderer.delta_chunk(call.delta(sent, end), last and TOOL_CALLS))
                    sent = end
                    continue
                if sent < thought < end:  # one chunk of reasoning and answer tokens
                    parts.append(
                        renderer.switch_chunk(
                            orjson.dumps(vocab.text(offset, sent, min(thought, text_total))),
                            orjson.dumps(vocab.text(offset, thought, min(end, text_total))),
                            last,
                        )
                    )
                    sent = end
                    continue
                if end - sent == 1 and sent < text_total:
                    text_json = vocab.json_of_one(offset, sent)
                else:
                    text_json = orjson.dumps(vocab.text(offset, sent, min(end, text_total)))
                parts.append(renderer.content_chunk(text_json, last, sent < thought))
                sent = end
            if trace is not None:  # stamped as the bytes go out: the client cannot see them earlier
                trace.tokens.extend([time.time()] * (sent - before))
            return body.write(b"".join(parts))

        strike_at = (
            fault.strike_at(total) if fault is not None and fault.kind in STREAM_STRIKES else -1
        )
        if strike_at == 0:
            assert fault is not None  # strike_at is -1 without one
            await strike(fault, request, response)
        # a source that can push its tokens (fixed latency) writes them from its clock's timer
        push = getattr(source, "push", None) if strike_at < 0 else None
        while sent < total:
            if push is not None:
                await push(emit, per_chunk)
                if sent < total:
                    await writer.drain()
                continue
            if emit(await source.wait(1 if sent == 0 else sent + per_chunk)):
                await writer.drain()
            if 0 < strike_at <= sent:
                strike_at = -1
                assert fault is not None  # strike_at is -1 without one
                await strike(fault, request, response)
        tail = [_DONE]
        if req.include_usage:
            tail.insert(
                0, renderer.usage_chunk(req.prompt_tokens, total, self._cached(source), thought)
            )
        if trace is not None:
            trace.end = time.time()
        body.write(b"".join(tail))
        await response.write_eof()
