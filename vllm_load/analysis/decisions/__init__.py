"""What a tuning effort decides with: latency SLOs, goodput under them, A/B comparison.

- `slo`: SLOs as a user writes them (`--slo ttft<=2s`), parsed once.
- `goodput`: per level, the share of requests meeting the SLOs and the load they carry.
- `ab`: two sets of runs compared per level and figure; `significance`: the tests it chooses from.
"""
