"""Every use of another library's private API, one module per library.

A private attribute can change in any release without notice, and most of ours would then fail
a run silently (a stale CSV, a worker's last records lost, a stream read without timestamps)
rather than crash. So each one lives here as a small named function or constant whose docstring
says which attribute, what we rely on it doing, and the release it was checked with;
tests/code/test_compat.py checks each against the installed library and names what changed, and
setup.cfg caps locust, geventhttpclient and gevent at the releases those tests passed on.

- `argparse`: the actions of a parser, its subcommands' parsers, the help-string hook.
- `gevent`: a gevent socket's stdlib socket and read watcher (the stream reader).
- `geventhttpclient`: a response's body buffer and connection, a pool's address lookup.
- `locust`: a user's stopping state, a worker's report, the CSV writer's rows, the report
  interval.

Importing this package imports none of them: `compat.argparse` is safe where gevent must not
be imported (the CLI, pytest), the others only where their library is already in use. A hot
path takes what it needs once per request or connection, never once per read.
"""
