"""A trace replay (`--trace`), read over time as the trace is read, and as a whole.

- `plan`: which levels of a run are trace replays (steps.csv `kind`), and run.json's `trace`.
- `windows`: per window along the replay: requests due, ended and failed, in flight,
  throughput, latency percentiles, send lateness, and the server's throughput beside the
  client's.
- `whole`: the whole replay as one level: totals, percentiles, SLO attainment and goodput.
- `verdicts`: whether the client kept to the schedule, and the server's prefix-cache hits
  against the reuse the trace implies.
- `read`: all of it for a run, with the sentences the report shows.
"""
