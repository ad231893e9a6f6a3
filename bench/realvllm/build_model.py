"""Build the tiny random-init Llama and its tokenizer in a directory (run with the vLLM venv's
Python, which has torch and transformers; nothing is downloaded).

    python build_model.py OUT_DIR CORPUS_FILE

The tokenizer is a byte-level BPE trained on CORPUS_FILE (one text line per line), wrapped as a
`PreTrainedTokenizerFast` with Llama-3-style special tokens (plain strings, as transformers 5.x
wants them) and a chat template, and saved with `save_pretrained`. The model is a 4-layer
Llama (hidden 256, intermediate 512, 4 heads) with the tokenizer's vocabulary size, saved in
bfloat16 with `save_pretrained`. A file `BUILT` is written last: a directory without it is
incomplete.
"""

from __future__ import annotations

import json
import os
import sys

BOS = "<|begin_of_text|>"
EOS = "<|end_of_text|>"
EOT = "<|eot_id|>"
HEADER_START = "<|start_header_id|>"
HEADER_END = "<|end_header_id|>"
SPECIAL_TOKENS = [BOS, EOS, EOT, HEADER_START, HEADER_END]

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] | trim }}"
    "{% else %}{% for part in message['content'] %}{{ part['text'] }}{% endfor %}{% endif %}"
    "{{ '<|eot_id|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)

#: the model's shape: small enough for a 2-core CPU, long enough for 2048 + 512 tokens
SHAPE = dict(
    num_hidden_layers=4,
    hidden_size=256,
    intermediate_size=512,
    num_attention_heads=4,
    num_key_value_heads=4,
    max_position_embeddings=8192,
)
VOCAB = 3000


def build_tokenizer(
    out: str,
    corpus: list[str],
    special_tokens: list[str] = SPECIAL_TOKENS,
    chat_template: str = CHAT_TEMPLATE,
):
    """Train the BPE (with `special_tokens`, each one token), wrap it, save it; returns the
    transformers tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=special_tokens,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    bos_id = tok.token_to_id(BOS)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOT,
        pad_token=EOS,
        model_max_length=SHAPE["max_position_embeddings"],
    )
    fast.chat_template = chat_template
    fast.save_pretrained(out)
    return fast


def build_model(out: str, tokenizer) -> None:
    """Random-init Llama with the tokenizer's vocabulary, saved in bfloat16."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
        **SHAPE,
    )
    save_model(LlamaForCausalLM(config), tokenizer, out)


def save_model(model, tokenizer, out: str) -> None:
    """`model` in bfloat16 and its generation config (the tokenizer's special ids) into `out`."""
    import torch
    from transformers import GenerationConfig

    model = model.to(torch.bfloat16)
    model.config.torch_dtype = torch.bfloat16
    model.save_pretrained(out)
    GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    ).save_pretrained(out)


def read_corpus(argv: list[str]) -> tuple[str, list[str]]:
    """(the output folder, made, and the corpus lines) from a builder's argv."""
    out, corpus_file = argv[1], argv[2]
    os.makedirs(out, exist_ok=True)
    with open(corpus_file, encoding="utf-8") as fh:
        return out, [line.rstrip("\n") for line in fh if line.strip()]


def main(argv: list[str]) -> int:
    out, corpus = read_corpus(argv)
    tokenizer = build_tokenizer(out, corpus)
    build_model(out, tokenizer)
    with open(os.path.join(out, "BUILT"), "w", encoding="utf-8") as fh:
        json.dump({"vocab_size": len(tokenizer), **SHAPE}, fh)
    print(f"model and tokenizer written to {out} (vocab {len(tokenizer)})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
