"""The shared tokenizers: the sim tokenizer's rules, a local HF tokenizer, and the simulator
serving with one (including without /tokenize)."""

from __future__ import annotations

import random

import pytest
from support.sim_http import call

from vllm_load.sim.child import SimulatorProcess
from vllm_load.tokenization.choose import load_tokenizer
from vllm_load.tokenization.hf import HFTokenizer
from vllm_load.tokenization.sim import SimTokenizer


def test_sim_tokenizer_is_not_word_counting():
    tok = SimTokenizer()
    assert tok.pieces("Tokenization, however, isn't counting words!") == [
        "Toke",
        "niza",
        "tion",
        ",",
        " howe",
        "ver",
        ",",
        " isn",
        "'",
        "t",
        " coun",
        "ting",
        " word",
        "s",
        "!",
    ]
    assert tok.pieces("in 2048 steps") == ["in", " 204", "8", " step", "s"]
    assert tok.pieces("a  b\n\nc") == ["a", " ", " b", "\n", "\n", "c"]
    assert tok.pieces("café 日本") == ["caf", "é", " 日", "本"]
    assert tok.pieces("x <|im_end|>") == ["x", " ", "<|im_end|>"]  # a special token is always one


def test_sim_tokenizer_round_trips_and_counts_like_encode():
    tok = SimTokenizer()
    rng = random.Random(7)
    alphabet = "abcXYZ019 .,!\n\té日<|>_-"
    for _ in range(500):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        ids = tok.encode(text)
        assert tok.decode(ids) == text
        assert tok.count(text) == len(ids)
        assert tok.encode(text, add_special_tokens=True) == [
            tok.encode("<|begin_of_text|>")[0],
            *ids,
        ]
    with pytest.raises(ValueError):
        tok.decode([tok.vocab_size])


def test_sim_chat_template_overhead_is_fixed_per_message():
    tok = SimTokenizer()
    one = [{"role": "user", "content": "Hello there"}]
    assert (
        tok.render_chat(one) == "<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n"
    )
    content = tok.count("Hello there")
    assert len(tok.encode_chat(one)) == content + 5 + 5  # user message + generation prompt
    assert len(tok.encode_chat(one, add_generation_prompt=False)) == content + 5
    two = one + [{"role": "user", "content": [{"type": "text", "text": "Hello there"}]}]
    assert len(tok.encode_chat(two)) == 2 * (content + 5) + 5


def test_load_tokenizer_choices(tmp_path):
    assert isinstance(load_tokenizer(None), SimTokenizer) and isinstance(
        load_tokenizer("sim"), SimTokenizer
    )
    with pytest.raises(ValueError, match="directory"):
        load_tokenizer("meta-llama/Llama-3.1-8B")
    with pytest.raises(ValueError, match="tokenizer.json"):
        load_tokenizer(str(tmp_path))


def test_hf_tokenizer_from_a_local_directory(hf_tokenizer_dir):
    tok = load_tokenizer(hf_tokenizer_dir)
    assert isinstance(tok, HFTokenizer)
    messages = [{"role": "user", "content": "Continue the story"}]
    text = tok.render_chat(messages)
    assert text.startswith(
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nContinue the story<|eot_id|>"
    )
    assert text.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")
    ids = tok.encode_chat(messages)
    assert tok.decode(ids) == text
    specials = [tok.encode(s)[0] for s in ("<|begin_of_text|>", "<|eot_id|>")]
    assert ids.count(specials[0]) == 1 and ids.count(specials[1]) == 1  # special tokens once each
    assert tok.encode("the dog", add_special_tokens=True)[0] == specials[0]
    assert len(tok.encode(" the")) == 1


def test_simulator_with_an_hf_tokenizer_and_no_tokenize_endpoint(hf_tokenizer_dir):
    path = hf_tokenizer_dir
    local = load_tokenizer(path)
    messages = [{"role": "user", "content": "Continue the story of the dog and the cat, please."}]
    with SimulatorProcess("--echo", "--tokenizer", path, "--no-tokenize-endpoint") as sim:
        assert call(sim.url + "/tokenize", {"prompt": "x"})[0] == 404
        assert call(sim.url + "/detokenize", {"tokens": [1]})[0] == 404
        status, answer = call(
            sim.url + "/v1/chat/completions",
            {"messages": messages, "max_tokens": 5, "ignore_eos": True},
        )
        assert status == 200
        assert answer["usage"]["prompt_tokens"] == len(local.encode_chat(messages))
        assert len(local.encode(answer["choices"][0]["message"]["content"])) == 5
        status, answer = call(sim.url + "/v1/completions", {"prompt": "the dog", "max_tokens": 2})
        assert answer["usage"]["prompt_tokens"] == len(
            local.encode("the dog", add_special_tokens=True)
        )
        status, models = call(sim.url + "/v1/models")
        assert models["data"][0]["root"] == path


def test_simulator_with_an_hf_tokenizer_serves_tokenize(hf_tokenizer_dir):
    path = hf_tokenizer_dir
    local = load_tokenizer(path)
    messages = [{"role": "user", "content": "the dog"}]
    with SimulatorProcess("--echo", "--tokenizer", path) as sim:
        status, answer = call(sim.url + "/tokenize", {"messages": messages})
        assert status == 200 and answer["tokens"] == local.encode_chat(messages)
        status, back = call(sim.url + "/detokenize", {"tokens": answer["tokens"]})
        assert back["prompt"] == local.render_chat(messages)


def test_simulator_refuses_a_missing_tokenizer_directory(tmp_path):
    with pytest.raises(RuntimeError, match="tokenizer"):
        SimulatorProcess("--tokenizer", str(tmp_path / "missing"), startup_timeout=20).start()
