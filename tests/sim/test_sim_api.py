"""The simulator's OpenAI API as vLLM answers it: shapes, usage, lengths, errors, auth, metrics."""

from __future__ import annotations

import pytest
from support.sim_http import call, metric_value, sse_events

from vllm_load.sim.child import SimulatorProcess
from vllm_load.sim.config import IMITATED_VLLM
from vllm_load.tokenization.sim import SimTokenizer

MODEL = "sim-llama-8b"
MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Say something, please!"},
]


@pytest.fixture(scope="module")
def sim():
    with SimulatorProcess("--time-scale", "0.01", "--max-model-len", "4096") as s:
        yield s


@pytest.fixture(scope="module")
def keyed():
    with SimulatorProcess("--echo", "--api-key", "s3cret", "--served-model-name", "my/model") as s:
        yield s


def chat(sim, **body):
    return call(sim.url + "/v1/chat/completions", {"model": MODEL, "messages": MESSAGES, **body})


def test_models_health_version(sim):
    status, models = call(sim.url + "/v1/models")
    assert status == 200 and models["object"] == "list"
    card = models["data"][0]
    assert card["id"] == MODEL and card["object"] == "model" and card["owned_by"] == "vllm"
    assert (
        card["root"] == MODEL and card["max_model_len"] == 4096 and isinstance(card["created"], int)
    )
    assert call(sim.url + "/health")[0] == 200
    # vLLM's answer: the release it imitates, and a local version segment naming the simulator
    assert call(sim.url + "/version") == (200, {"version": f"{IMITATED_VLLM}+sim"})


def test_chat_usage_counts_the_chat_template_exactly(sim):
    status, answer = chat(sim, max_tokens=7, min_tokens=7)
    assert (
        status == 200
        and answer["object"] == "chat.completion"
        and answer["id"].startswith("chatcmpl-")
    )
    expected_prompt = len(SimTokenizer().encode_chat(MESSAGES))
    assert answer["usage"] == {
        "prompt_tokens": expected_prompt,
        "completion_tokens": 7,
        "total_tokens": expected_prompt + 7,
        "prompt_tokens_details": None,
    }
    choice = answer["choices"][0]
    assert choice["finish_reason"] == "length" and choice["message"]["role"] == "assistant"
    # the generated text is made of single tokens: it re-tokenizes to its length
    assert len(SimTokenizer().encode(choice["message"]["content"])) == 7


def test_completions_usage_counts_the_bos(sim):
    status, answer = call(
        sim.url + "/v1/completions",
        {
            "model": MODEL,
            "prompt": "Tokenizers, unlike words!",
            "max_tokens": 3,
            "ignore_eos": True,
        },
    )
    assert status == 200 and answer["object"] == "text_completion"
    assert answer["usage"]["prompt_tokens"] == len(
        SimTokenizer().encode("Tokenizers, unlike words!", True)
    )
    assert (
        answer["usage"]["completion_tokens"] == 3
        and answer["choices"][0]["finish_reason"] == "length"
    )


def test_chat_stream_shape_like_vllm(sim):
    status, text = chat(
        sim, max_tokens=5, ignore_eos=True, stream=True, stream_options={"include_usage": True}
    )
    assert status == 200
    events = sse_events(text)
    assert events[-1] == "[DONE]"
    first, *content, usage, _ = events
    assert first["object"] == "chat.completion.chunk"
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert len(content) == 5 and all(e["choices"][0]["delta"]["content"] for e in content)
    assert [e["choices"][0]["finish_reason"] for e in content] == [None] * 4 + ["length"]
    assert len({e["id"] for e in events[:-1]}) == 1
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 5
    assert usage["usage"]["prompt_tokens"] == len(SimTokenizer().encode_chat(MESSAGES))


def test_completions_stream_without_usage(sim):
    status, text = call(
        sim.url + "/v1/completions",
        {"model": MODEL, "prompt": "Once", "max_tokens": 4, "min_tokens": 4, "stream": True},
    )
    events = sse_events(text)
    assert status == 200 and events[-1] == "[DONE]" and len(events) == 5
    assert all(e["object"] == "text_completion" and e["choices"][0]["text"] for e in events[:-1])
    assert events[3]["choices"][0]["finish_reason"] == "length"
    assert not any("usage" in e and e["usage"] for e in events[:-1])


@pytest.mark.parametrize("forcing", [{"min_tokens": 300}, {"ignore_eos": True}])
def test_min_tokens_or_ignore_eos_force_the_exact_length(sim, forcing):
    for seed in range(10):
        status, answer = chat(sim, max_tokens=300, seed=seed, **forcing)
        assert status == 200
        assert answer["usage"]["completion_tokens"] == 300
        assert answer["choices"][0]["finish_reason"] == "length"


def test_without_them_outputs_end_early_at_a_simulated_eos(sim):
    lengths, reasons = [], set()
    for seed in range(10):
        status, answer = chat(sim, max_tokens=300, seed=seed)
        assert status == 200
        lengths.append(answer["usage"]["completion_tokens"])
        reasons.add(answer["choices"][0]["finish_reason"])
    assert (
        reasons == {"stop"} and max(lengths) < 300
    )  # 0.99**300 = 5%: ten in a row reaching 300 is ~1e-13
    # seeded: the same seed gives the same length and text
    again = [
        chat(sim, max_tokens=300, seed=seed)[1]["usage"]["completion_tokens"] for seed in range(3)
    ]
    assert again == lengths[:3]


def test_min_tokens_delays_the_eos_but_does_not_forbid_it(sim):
    lengths = [
        chat(sim, max_tokens=400, min_tokens=50, seed=s)[1]["usage"]["completion_tokens"]
        for s in range(8)
    ]
    assert all(50 < n < 400 for n in lengths)


def test_max_completion_tokens_wins_over_max_tokens(sim):
    status, answer = chat(sim, max_tokens=10, max_completion_tokens=4, ignore_eos=True)
    assert status == 200 and answer["usage"]["completion_tokens"] == 4


def _assert_error(status_and_body, status, param_or_none="any"):
    got_status, body = status_and_body
    assert got_status == status, body
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == status and error["message"]
    assert (
        error["type"]
        == {400: "BadRequestError", 401: "AuthenticationError", 404: "NotFoundError"}[status]
    )
    if param_or_none != "any":
        assert error["param"] == param_or_none


def test_errors_bad_requests(sim):
    url = sim.url + "/v1/chat/completions"
    _assert_error(call(url, raw=b"{not json"), 400)
    _assert_error(call(url, raw=b"[1, 2]"), 400)
    _assert_error(call(url, {"model": MODEL}), 400, "messages")
    _assert_error(call(url, {"model": MODEL, "messages": "hi"}), 400, "messages")
    _assert_error(
        call(sim.url + "/v1/completions", {"model": MODEL, "max_tokens": 3}), 400, "prompt"
    )
    _assert_error(
        chat(sim, max_tokens=4096), 400, "max_tokens"
    )  # prompt + max_tokens > max_model_len
    _assert_error(chat(sim, max_tokens=0), 400, "max_tokens")
    _assert_error(chat(sim, max_tokens="5"), 400, "max_tokens")
    _assert_error(chat(sim, max_tokens=5, min_tokens=6), 400, "min_tokens")
    _assert_error(chat(sim, n=2), 400, "n")
    _assert_error(chat(sim, stream_options={"include_usage": True}), 400, "stream_options")
    _assert_error(chat(sim, temperature=-1), 400, "temperature")
    # still serving after all that
    assert chat(sim, max_tokens=2)[0] == 200


def test_error_unknown_model(sim):
    _assert_error(
        call(sim.url + "/v1/chat/completions", {"model": "gpt-4", "messages": MESSAGES}),
        404,
        "model",
    )
    _assert_error(
        call(sim.url + "/v1/completions", {"model": "gpt-4", "prompt": "x"}), 404, "model"
    )
    _assert_error(call(sim.url + "/tokenize", {"model": "gpt-4", "prompt": "x"}), 404, "model")


def test_api_key(keyed):
    body = {"model": "my/model", "messages": MESSAGES, "max_tokens": 3}
    url = keyed.url + "/v1/chat/completions"
    _assert_error(call(url, body), 401)
    _assert_error(call(url, body, headers={"Authorization": "Bearer wrong"}), 401)
    _assert_error(call(keyed.url + "/v1/models"), 401)
    status, answer = call(url, body, headers={"Authorization": "Bearer s3cret"})
    assert status == 200 and answer["model"] == "my/model"
    assert call(keyed.url + "/health")[0] == 200  # like vLLM, only /v1 needs the key
    assert call(keyed.url + "/metrics")[0] == 200


def test_tokenize_and_detokenize(sim):
    tok = SimTokenizer()
    status, answer = call(
        sim.url + "/tokenize", {"model": MODEL, "prompt": "Hello, tokenizer world"}
    )
    assert status == 200
    assert answer["tokens"] == tok.encode("Hello, tokenizer world", add_special_tokens=True)
    assert answer["count"] == len(answer["tokens"]) and answer["max_model_len"] == 4096
    status, plain = call(
        sim.url + "/tokenize", {"prompt": "Hello, tokenizer world", "add_special_tokens": False}
    )
    assert plain["count"] == answer["count"] - 1
    status, chat_answer = call(
        sim.url + "/tokenize", {"model": MODEL, "messages": MESSAGES, "add_generation_prompt": True}
    )
    assert status == 200 and chat_answer["tokens"] == tok.encode_chat(MESSAGES)
    # the same count the completion's usage reports
    assert chat_answer["count"] == chat(sim, max_tokens=1)[1]["usage"]["prompt_tokens"]
    status, back = call(sim.url + "/detokenize", {"model": MODEL, "tokens": plain["tokens"]})
    assert status == 200 and back == {"prompt": "Hello, tokenizer world"}
    _assert_error(call(sim.url + "/detokenize", {"tokens": [-5]}), 400, "tokens")
    _assert_error(call(sim.url + "/detokenize", {"tokens": "abc"}), 400, "tokens")
    _assert_error(call(sim.url + "/tokenize", {"model": MODEL}), 400)


def test_metrics_have_vllm_names_and_count_tokens(sim):
    before = call(sim.url + "/metrics")[1]
    status, answer = chat(sim, max_tokens=6, ignore_eos=True)
    status, after = call(sim.url + "/metrics")
    assert status == 200
    for name in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:num_preemptions_total",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:inter_token_latency_seconds_bucket",
        "vllm:e2e_request_latency_seconds_bucket",
        "vllm:request_queue_time_seconds_bucket",
        "vllm:e2e_request_latency_seconds_count",
        "vllm:request_success_total",
    ):
        assert f'{name}{{engine="0"' in after, name
    assert f'model_name="{MODEL}"' in after
    for name, delta in (
        ("vllm:generation_tokens_total", 6),
        ("vllm:prompt_tokens_total", answer["usage"]["prompt_tokens"]),
        ("vllm:e2e_request_latency_seconds_count", 1),
        ("vllm:inter_token_latency_seconds_count", 5),
    ):
        assert metric_value(after, name) - metric_value(before, name) == delta, name
    assert metric_value(after, "vllm:num_requests_running") == 0


def test_the_openai_client_streams_unchanged(sim):
    import openai

    client = openai.OpenAI(base_url=sim.url + "/v1", api_key="unused", max_retries=0, timeout=30)
    stream = client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        max_tokens=8,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].usage.completion_tokens == 8 and len(SimTokenizer().encode(text)) == 8
    completion = client.completions.create(
        model=MODEL, prompt="Hi", max_tokens=3, extra_body={"ignore_eos": True}
    )
    assert completion.usage.completion_tokens == 3
    assert [m.id for m in client.models.list()] == [MODEL]


def test_a_client_that_leaves_frees_its_place_in_the_engine():
    import socket
    import time

    with SimulatorProcess("--max-num-seqs", "4") as slow:  # real time: 1000 tokens would take 10 s
        host, port = slow.url.rsplit("/", 1)[1].split(":")
        body = b'{"messages":[{"role":"user","content":"hi"}],"max_tokens":1000,"ignore_eos":true,"stream":%s}'
        for stream in (b"true", b"false"):
            payload = body % stream
            with socket.create_connection((host, int(port))) as s:
                s.sendall(
                    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(payload), payload)
                )
                deadline = time.monotonic() + 5
                while (
                    metric_value(call(slow.url + "/metrics")[1], "vllm:num_requests_running") != 1
                ):
                    assert time.monotonic() < deadline
                    time.sleep(0.02)
            deadline = time.monotonic() + 5
            while metric_value(call(slow.url + "/metrics")[1], "vllm:num_requests_running") != 0:
                assert time.monotonic() < deadline, (
                    "the engine kept generating for a client that left"
                )
                time.sleep(0.02)
        metrics = call(slow.url + "/metrics")[1]
        assert 'finished_reason="abort"' in metrics
        aborts = [line for line in metrics.splitlines() if 'finished_reason="abort"' in line]
        assert float(aborts[0].rsplit(" ", 1)[1]) == 2
        assert metric_value(metrics, "vllm:kv_cache_usage_perc") == 0


def test_a_32k_prompt_with_a_longer_context_option():
    with SimulatorProcess("--max-model-len", "40960", "--time-scale", "0.01") as big:
        status, answer = call(
            big.url + "/v1/completions",
            {"prompt": " the" * 32767, "max_tokens": 512, "ignore_eos": True},
        )
        assert status == 200 and answer["usage"]["prompt_tokens"] == 32768  # BOS included
        assert answer["usage"]["completion_tokens"] == 512
        _assert_error(
            call(big.url + "/v1/completions", {"prompt": " the" * 40960, "max_tokens": 1}),
            400,
            "max_tokens",
        )


def test_only_the_engine_describes_a_kv_cache(sim, keyed):
    engine_metrics, echo_metrics = call(sim.url + "/metrics")[1], call(keyed.url + "/metrics")[1]
    assert 'vllm:cache_config_info{_block_size_resolved="True",block_size="16"' in engine_metrics
    assert "vllm:cache_config_info" not in echo_metrics  # echo mode has no KV cache
