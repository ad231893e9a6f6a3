"""Reports over run directories: HTML with embedded charts, Markdown tables, summary JSON and CSV.

- `model`: the numbers (runs measured, grouped into series, aggregated and analysed).
- `charts`: matplotlib figures embedded as PNG data URIs.
- `summary`: the machine-readable outputs.
- `cells`: how a value is written in a table cell (the templates' filters).
- `render`: `build_report`, which writes them all; `cli`: `vllm-load report`.
- `replay`: a trace replay over time (its chart, its summary entries).

Fourteen modules, over the ~12 of a folder until each kind of report (runs, Locust CSVs, A/B)
gets a subfolder of its own (../shared/design.md, "a kind of report").
"""
