"""Build the tiny model's reasoning variant in a directory of its own (run with the vLLM venv's
Python; nothing is downloaded):

    python build_reasoning_model.py OUT_DIR BASE_MODEL_DIR [--end-probability 0.03125]

The tokenizer is the base model's (`build_model.py`) plus `<think>` and `</think>` as added,
non-special tokens (as DeepSeek-R1's and Qwen3's tokenizers have them: each one token, kept in
the decoded text, so a reasoning parser finds them by `get_vocab()` and in the text), with the
base chat template followed by `<think>\\n` after the generation prompt (as DeepSeek-R1's
template does), so every reply starts inside its thinking.

The model is the base shape, random-initialised (seed 0), then edited so that it ends its
thinking at a known rate instead of (with 3002 tokens, nearly uniform) about once in 3000 tokens:

1. dimension 0 of every token embedding is set to `RESIDUAL_CONSTANT` (1.0; the others are
   random, std 0.02), and row 0 of every layer's `o_proj` and `down_proj` is zeroed, so no layer
   writes to dimension 0: the residual stream's dimension 0 is that constant at every position,
   and after the final RMSNorm it is a nearly constant `h0` (the other dimensions are small);
2. column 0 of `lm_head` is zeroed for every token (their logits come from the random
   dimensions alone), except `</think>`'s, set so that its logit is raised by the same amount
   at every position: `</think>` is sampled with probability `--end-probability` per token
   (default 1/32: a reply of 64 tokens ends its thinking in about 87 % of requests, after 32
   tokens on average), and `<think>`'s, set to lower its logit by 30 (never sampled, so no reply
   reopens its thinking).

The probability is calibrated on random token sequences with the saved weights (bfloat16) and
written, measured again, into `BUILT` (written last: a directory without it is incomplete).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from build_model import CHAT_TEMPLATE, SHAPE  # noqa: E402

THINK_START, THINK_END = "<think>", "</think>"
REASONING_CHAT_TEMPLATE = CHAT_TEMPLATE.replace(
    "'<|start_header_id|>assistant<|end_header_id|>\\n\\n'",
    "'<|start_header_id|>assistant<|end_header_id|>\\n\\n<think>\\n'",
)
RESIDUAL_CONSTANT = 1.0
NEVER = -30.0  # the logit offset that keeps <think> out of every reply
CALIBRATION = dict(sequences=8, length=256, seed=1)


def build_tokenizer(out: str, base_dir: str):
    from tokenizers import AddedToken
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(base_dir)
    added = tok.add_tokens(
        [AddedToken(t, special=False, normalized=False) for t in (THINK_START, THINK_END)]
    )
    assert added == 2, f"{THINK_START} / {THINK_END} were already in the base vocabulary"
    assert REASONING_CHAT_TEMPLATE != CHAT_TEMPLATE
    tok.chat_template = REASONING_CHAT_TEMPLATE
    tok.save_pretrained(out)
    return tok


def _hidden_and_logits(model, ids):
    import torch

    with torch.no_grad():
        out = model(input_ids=ids, output_hidden_states=True)
    return out.hidden_states[-1].float(), out.logits.float()


def end_probability(model, tok, vocab: int) -> tuple[float, float]:
    """(mean, std over positions) of P(</think>) on random token sequences."""
    import torch

    g = torch.Generator().manual_seed(CALIBRATION["seed"])
    ids = torch.randint(0, vocab, (CALIBRATION["sequences"], CALIBRATION["length"]), generator=g)
    _, logits = _hidden_and_logits(model, ids)
    p = torch.softmax(logits, dim=-1)[..., tok.convert_tokens_to_ids(THINK_END)]
    return float(p.mean()), float(p.std())


def build_model(out: str, tok, end_p: float) -> dict:
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tok),
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=False,
        **SHAPE,
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16).eval()
    start_id, end_id = tok.convert_tokens_to_ids(THINK_START), tok.convert_tokens_to_ids(THINK_END)
    with torch.no_grad():
        model.model.embed_tokens.weight[:, 0] = RESIDUAL_CONSTANT
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight[0, :] = 0
            layer.mlp.down_proj.weight[0, :] = 0
        model.lm_head.weight[:, 0] = 0
        # the normed dimension 0 (h0) and the logits without any bias, on calibration sequences
        g = torch.Generator().manual_seed(CALIBRATION["seed"])
        ids = torch.randint(
            0, len(tok), (CALIBRATION["sequences"], CALIBRATION["length"]), generator=g
        )
        hidden, logits = _hidden_and_logits(model, ids)
        h0 = hidden[..., 0]
        others = logits.clone()
        others[..., [start_id, end_id]] = -math.inf
        # P(end) = e^(l + b) / (e^(l + b) + Z): b for the target at the mean Z and mean l
        log_z = float(torch.logsumexp(others, dim=-1).mean())
        base = float(logits[..., end_id].mean())
        bias = math.log(end_p / (1 - end_p)) + log_z - base
        model.lm_head.weight[end_id, 0] = bias / float(h0.mean())
        model.lm_head.weight[start_id, 0] = NEVER / float(h0.mean())
    measured, spread = end_probability(model, tok, len(tok))
    model.config.torch_dtype = torch.bfloat16
    model.save_pretrained(out)
    GenerationConfig(
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id
    ).save_pretrained(out)
    return {
        "h0_mean": round(float(h0.mean()), 3),
        "h0_std": round(float(h0.std()), 3),
        "end_logit_bias": round(bias, 3),
        "end_probability_target": end_p,
        "end_probability_measured": round(measured, 5),
        "end_probability_std": round(spread, 5),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("base")
    p.add_argument("--end-probability", type=float, default=1 / 32)
    a = p.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    tok = build_tokenizer(a.out, a.base)
    facts = build_model(a.out, tok, a.end_probability)
    built = {
        "vocab_size": len(tok),
        "think_start_id": tok.convert_tokens_to_ids(THINK_START),
        "think_end_id": tok.convert_tokens_to_ids(THINK_END),
        "residual_constant": RESIDUAL_CONSTANT,
        **facts,
        **SHAPE,
    }
    with open(os.path.join(a.out, "BUILT"), "w", encoding="utf-8") as fh:
        json.dump(built, fh)
    print(f"reasoning model written to {a.out}: {json.dumps(facts)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
