"""One test run on the master (or the single local process): the session wired into Locust's events, the stepped plan and shape, the run directory writer, live figures, the /metrics scraper."""
