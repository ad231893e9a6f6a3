"""Control-plane HTTP calls (model list, version, /tokenize, health), not load traffic.

Plain urllib so it works the same in a gevent-patched Locust process and in the CLI.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from typing import Any


class HttpError(Exception):
    """A control-plane call failed; `status` is the HTTP status or 0 if none arrived."""

    def __init__(self, url: str, status: int, message: str) -> None:
        super().__init__(f"{url}: {f'HTTP {status}: ' if status else ''}{message}")
        self.url = url
        self.status = status


def auth_headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def request_json(
    url: str,
    body: Any = None,
    api_key: str | None = None,
    timeout: float = 30.0,
) -> Any:
    """GET (or POST when `body` is given) `url` and return the decoded JSON answer."""
    data = None if body is None else json.dumps(body).encode()
    headers = {"Accept": "application/json", **auth_headers(api_key)}
    if data is not None:
        headers["Content-Type"] = "application/json"
    try:
        req = urllib.request.Request(
            url, data=data, headers=headers, method="POST" if data is not None else "GET"
        )
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
    except urllib.error.HTTPError as e:
        detail = e.read()[:300].decode("utf-8", "replace")
        raise HttpError(url, e.code, detail) from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise HttpError(url, 0, str(reason)) from None
    except (
        ValueError,
        http.client.HTTPException,
    ) as e:  # a URL urllib cannot use, an answer that is not HTTP
        raise HttpError(url, 0, str(e) or type(e).__name__) from None
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return raw.decode("utf-8", "replace")


def target_info(host: str, api_key: str | None = None, timeout: float = 10.0) -> dict:
    """What the target says about itself: /v1/models and /version (None where absent)."""
    info: dict[str, Any] = {"host": host, "models": None, "version": None}
    for key, path in (("models", "/v1/models"), ("version", "/version")):
        try:
            info[key] = request_json(host.rstrip("/") + path, api_key=api_key, timeout=timeout)
        except HttpError as e:
            info[f"{key}_error"] = str(e)
    return info


def model_ids(models: Any) -> list[str]:
    if isinstance(models, dict):
        return [m["id"] for m in models.get("data") or [] if isinstance(m, dict) and m.get("id")]
    return []


def max_model_len(models: Any, model: str) -> int | None:
    if isinstance(models, dict):
        for entry in models.get("data") or []:
            if isinstance(entry, dict) and entry.get("id") == model and entry.get("max_model_len"):
                return int(entry["max_model_len"])
    return None
