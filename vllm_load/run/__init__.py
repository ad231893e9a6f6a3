"""One test run on the master (or the single local process): the session wired into Locust's events, the stepped plan and shape, the run directory writer, live figures, the /metrics scraper.

Thirteen modules, over the ~12: the web UI's live figures take three of them (`live`, its time
series `timeline`, each level's verdict so far `live_verdict`), each one concern of the same
test on the master; a package of their own would split that test across two folders.
"""
