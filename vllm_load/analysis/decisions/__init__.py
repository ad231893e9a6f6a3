"""What a tuning effort decides with: latency SLOs, goodput under them, A/B comparison.

- `slo`: SLOs as a user writes them (`--slo ttft<=2s`), parsed once.
- `goodput`: per level, the share of requests meeting the SLOs and the load they carry.
- `slo_search`: the highest level meeting an SLO, searched (`tune --slo`); `slo_interval`: whether
  one level's requests prove the SLO held.
- `ab`: two sets of runs compared per level and figure; `significance`: the tests it chooses from.
"""
