"""Tokenizers shared by the simulator (to count and produce tokens) and the client (to build
exact-length prompts without a server `/tokenize`).

- `base`: what a tokenizer must do (`Tokenizer`) and the text of an OpenAI message.
- `sim`: `SimTokenizer`, the simulator's own deterministic tokenizer (not word counting, so a
  client can only hit an exact prompt length by asking `/tokenize` or by using this same one);
  its rules are documented in docs/simulator.md: keep the two in step.
- `hf`: `HFTokenizer`, a local Hugging Face tokenizer directory as transformers writes it (never
  downloads anything).
- `load`: `load_tokenizer("sim" | DIRECTORY)`.
"""
