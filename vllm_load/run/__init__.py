"""One test run on the master (or the single local process): the session wired into Locust's events, the stepped plan and shape, the run directory writer, live figures, the /metrics scraper, the test's own metrics for Prometheus.

Twenty modules, over the ~12: the web UI's live figures take three of them (`live`, its time series
`timeline`, each level's verdict so far `live_verdict`), and the test's own metrics for
Prometheus two (`prometheus_export`, `prometheus_tallies`), each one concern of the same test on
the master, fed by the same session (as are finding a lost worker, `worker_loss`, and judging
the --stop-when rules, `stop_rules`); a package of their own would split that test across two
folders.
"""
