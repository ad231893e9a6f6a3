"""Where a user's requests go and what each asks for: the `Endpoint` (one user's connection,
headers and `Timeouts`) and the `RequestSpec` of one request (API, streaming, body, the token
counts it asked for, its labels). `request.MeasuredRequest` sends a spec to an endpoint."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlparse

from geventhttpclient import HTTPClient

from ..compat.geventhttpclient import PostHead, post, post_whole
from ..endpoints import APIS
from ..settings import Settings
from .reader import RECV_SIZE


@dataclass(frozen=True, slots=True)
class Timeouts:
    """A request's time limits in seconds (`request`'s module docstring says where each one acts)."""

    connect: float
    stall: float
    first_token: float
    total: float

    @classmethod
    def of(cls, settings: Settings) -> Timeouts:
        return cls(
            settings.connect_timeout,
            settings.stall_timeout,
            settings.ttft_timeout,
            settings.request_timeout,
        )


class Endpoint:
    """Where one user's requests go: its own connection to the server, with the headers and time
    limits every request shares. Each request names its API (`endpoints.APIS`) and whether it
    streams."""

    def __init__(
        self,
        host: str,
        timeouts: Timeouts,
        api_key: str | None = None,
        name: str = "",
        traced: bool = False,
    ) -> None:
        """`name`: the target as its records name it (`client/target_picker.py`; "" with one);
        `traced`: every request carries a `traceparent` (--traceparent)."""
        self.name = name
        self.traced = traced
        self.timeouts = timeouts
        base = urlparse(host).path.rstrip("/")
        self.paths = {name: base + api.path for name, api in APIS.items()}
        self.headers = {
            stream: {
                "Content-Type": "application/json",
                "Accept": "text/event-stream" if stream else "application/json",
            }
            for stream in (True, False)
        }
        if api_key:
            for headers in self.headers.values():
                headers["Authorization"] = f"Bearer {api_key}"
        self.client = HTTPClient.from_url(
            host,
            concurrency=1,
            connection_timeout=timeouts.connect,
            network_timeout=timeouts.stall,  # until the headers; then STALLS (`request`'s docstring)
            block_size=RECV_SIZE,
        )
        # each kind of request's head, built once (the client's own merge, checks and build of
        # it cost 30 us a request)
        self._heads = {
            (api, stream): PostHead(self.client, self.paths[api], self.headers[stream], traced)
            for api in APIS
            for stream in (True, False)
        }

    def post(self, api: str, stream: bool, request_id: str, body: bytes, traceparent: str = ""):
        """POST one request (`X-Request-Id: request_id`, and `traceparent` where the endpoint is
        `traced`) to `api`; its response, once the headers are in (a `geventhttpclient`
        response)."""
        head = self._heads[(api, stream)].of(request_id, len(body), traceparent)
        return (post if stream else post_whole)(self.client, head, body)

    def close(self) -> None:
        self.client.close()


def stats_name(api: str, stream: bool) -> str:
    """A request's name in Locust's statistics: its path, and whether it streamed."""
    return f"{APIS[api].path}{' (stream)' if stream else ''}"


@dataclass(slots=True)  # (not frozen: a frozen __init__ costs twice as much, per request)
class RequestSpec:
    """What one request asks for: its API (an `endpoints.APIS` name), whether it streams, its
    JSON body, the token counts it asked for (None where it fixed none), and what it belongs to
    (the user class, the task, the conversation and the turn in it, all carried to its record).
    `keep_text`: keep the reply's text (a conversation needs it for its next turn). `images`: the
    images in its messages, and `image_bytes` the bytes of those it carries (before base64).
    `trace_index`: the trace request it replays (--trace). `tools`: its body offers tools, so
    its reply's tool calls are read (`tool_calls.py`); `tool_wait`: the seconds its session
    waited for the tools of the turn before (an agentic session's); `parent`: the session that
    fanned out the subagent session it is a turn of."""

    api: str
    stream: bool
    body: bytes
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    user_class: str = ""
    task: str = ""
    conversation: str = ""
    turn: int = 0
    keep_text: bool = False
    images: int = 0
    image_bytes: int = 0
    trace_index: int | None = None  # the --trace request it replays
    tools: bool = False
    tool_wait: float | None = None
    parent: str = ""
