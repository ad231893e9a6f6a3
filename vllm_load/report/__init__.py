"""Reports over run directories: HTML with embedded charts, Markdown tables, summary JSON and CSV.

- `model`: the numbers (runs measured, grouped into series, aggregated and analysed).
- `charts`: matplotlib figures embedded as PNG data URIs.
- `summary`: the machine-readable outputs.
- `render`: `build_report`, which writes them all; `cli`: `vllm-load report`.
"""
