"""The stop signals (SIGINT, SIGTERM, SIGHUP), in the command's process and in the Locust child
it starts, at every moment of their lives.

A stop signal may come at any time: while the command imports and checks the target, while
Locust starts, during a level, while the run closes. Its default effect at most of those moments
was a traceback (SIGINT raised in an import), or death with nothing said (SIGTERM, SIGHUP).

- The command (`CommandStop`): the first stop signal is a KeyboardInterrupt (`StopSignal`: the
  command's own `finally` blocks run, `cli.main` prints one line and exits 130); later ones are
  counted, not raised into the clean-up of the first. It is deferred (counted, raised later)
  while the command imports its modules, and from the claim of the run directory until Locust
  is started. While Locust runs, `cli.locust_process.Stopper` takes them over and counts into
  the same tally.
- The Locust child: `cli.locust_process` starts it with the stop signals blocked, so none can
  kill it or raise in its imports before `hold` (in `locust_main`, before Locust is imported)
  notes them instead; the wiring takes them over once Locust's environment exists (`release`),
  and a stop noted before then ends the process (nothing has been written yet).
  `locust_main` is Locust's own command (`python -m locust ARGS`) with that one difference:
  the child runs `python -c "from vllm_load.stop_signals import locust_main; locust_main()" ARGS`.

A signal ignored when the process started (`nohup` ignores SIGHUP) stays ignored; SIGINT is the
exception (`cli.main.honour_ctrl_c`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator

from .parent_death import die_with_parent

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
EXIT_STOPPED = 130  # a command stopped by one (128 + SIGINT, as a shell reports Ctrl-C)


def listened() -> tuple[int, ...]:
    """The stop signals this process acts on: SIGINT always, the others unless ignored."""
    return tuple(
        s for s in SIGNALS if s == signal.SIGINT or signal.getsignal(s) is not signal.SIG_IGN
    )


class StopSignal(KeyboardInterrupt):
    """What the command's first stop signal raises (`CommandStop`): a KeyboardInterrupt, caught
    as one. A subclass, not KeyboardInterrupt itself: CPython (3.11, 3.12) notes a plain one that
    leaves any exec() of a string (each dataclass made while a module is imported runs one) and,
    however it was caught afterwards, ends the process with SIGINT as it exits: a command stopped
    while it imported printed its one line, then exited -2 instead of 130 (2 tries in 16 of a
    SIGTERM 0.1-0.3 s into `vllm-load run`)."""


class CommandStop:
    """The stop signals a command has received, and its handler for them (`install`).

    The first raises `StopSignal` where the command is, unless they are `deferred`: while the
    command imports its modules (raised inside a C extension's import, it crashed the process:
    `import orjson` interrupted so segfaulted in 3 of 59 tries), and from the moment the command
    claims a run directory until its Locust takes them over (a raise there would leave the claim
    behind; `cli.locust_process.Launch` acts on those counted meanwhile)."""

    def __init__(self) -> None:
        self.received = 0
        self.first = 0  # the first one's number
        self.deferred = False
        self.unacted = 0  # received while deferred, not yet taken (`take`)
        self._previous: dict[int, object] = {}

    def install(self) -> None:
        if self._previous:  # (already: `__main__` takes them before `cli.main` is imported)
            return
        for signum in listened():
            self._previous[signum] = signal.signal(signum, self.on_signal)

    def restore(self) -> None:
        """Give the signals back their handlers from before `install` (for commands that stop
        as they always have)."""
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]
        self._previous.clear()

    def done(self) -> None:
        """The command has said its last line: a stop signal from now on changes nothing. (As
        Python exits it gives the default back to a signal it handled, and SIGTERM would then
        end the process with another status; an ignored one it leaves ignored.)"""
        for signum in self._previous or dict.fromkeys(listened()):
            signal.signal(signum, signal.SIG_IGN)

    def defer(self) -> None:
        """From now on a stop signal is counted, not raised, until `resume`."""
        self.deferred = True

    def resume(self) -> None:
        """Raise the stop signals again; those counted meanwhile are the caller's to act on."""
        self.deferred = False
        self.unacted = 0

    def proceed(self) -> None:
        """Raise the stop signals again, and `StopSignal` now if one came while deferred."""
        came = self.deferred and self.unacted
        self.resume()
        if came:
            raise StopSignal

    def take(self) -> int:
        """The signals counted while deferred since the last `take` (whoever takes them acts
        on them)."""
        taken, self.unacted = self.unacted, 0
        return taken

    def on_signal(self, signum, _frame) -> None:
        self.received += 1
        self.first = self.first or signum
        if self.deferred:
            self.unacted += 1
        elif self.received == 1:
            raise StopSignal
        # a later one: the command is already stopping (raised here it would cut its clean-up)


#: this command's stop signals (one command per process)
COMMAND_STOP = CommandStop()


def command_named(argv: list[str]) -> str:
    """The subcommand `argv` names (its first word that is not an option), for the last line of
    one stopped before its arguments are parsed."""
    return next((word for word in argv if not word.startswith("-")), "").strip() or "-"


# --- the Locust child ------------------------------------------------------------------------
def block_in_child() -> None:
    """In a child between fork and exec (`preexec_fn`): block the stop signals, so that one sent
    before `hold` waits for it (the mask survives exec) instead of killing the child or raising
    in Python's start-up."""
    signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)


_held: int | None = None  # the first stop signal noted by `hold`'s handler
_before_hold: dict[int, object] = {}
_forking: int | None = None  # the pid of the process forking, while it forks
_until_init = True  # held until Locust's environment exists (else: until the locustfile's import)


def _note(signum, _frame) -> None:
    global _held
    if _held is None:
        _held = signum


def hold(until_init: bool = True) -> None:
    """Note the stop signals instead of acting on them, then unblock them (a blocked one
    arrives now, and is noted); until Locust's environment exists (`release`), or, not
    `until_init`, until the locustfile is imported (`imported`)."""
    global _until_init
    _until_init = until_init
    for signum in listened():
        _before_hold[signum] = signal.signal(signum, _note)
    os.register_at_fork(before=_before_fork, after_in_child=_forked)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)


def _before_fork() -> None:
    global _forking
    _forking = os.getpid()


def _forked() -> None:
    """A process forked while the stop signals are held (Locust's `--processes` workers, forked
    before its environment exists): it dies at once with the process it was forked from. A
    stop there ends that process before it has written anything, and its workers, still
    waiting for it to answer, would otherwise wait minutes (they only note a SIGTERM)."""
    if _before_hold:
        die_with_parent(_forking, signal.SIGKILL)


def imported() -> int | None:
    """Locust has imported the locustfile (it has started nothing yet): the stop signal noted
    so far, if any. Held only until now (`hold(until_init=False)`: a worker, which then waits for
    its master, minutes if need be, before its environment exists; Locust stops it there on
    Ctrl-C itself), the signals are given back."""
    if _held is None and not _until_init:
        release()
    return _held


def release() -> int | None:
    """Give back the handlers `hold` replaced that are still its own; the stop signal noted
    meanwhile (None when none came, or `hold` was never called)."""
    for signum, handler in _before_hold.items():
        if signal.getsignal(signum) is _note:
            signal.signal(signum, handler)  # type: ignore[arg-type]
    _before_hold.clear()
    return _held


def locust_main(until_init: bool = True) -> None:
    """Locust's command, its arguments sys.argv's, with the stop signals held while it starts
    (`hold`)."""
    hold(until_init)
    sys.argv[0] = "locust"
    with entry_points_read_once():
        from locust.main import main  # (gevent patches the standard library: only in the child)

    main()


@contextlib.contextmanager
def entry_points_read_once() -> Iterator[None]:
    """Within it, `importlib.metadata.entry_points` reads the installed distributions once and
    answers every later call from that one reading.

    Locust's import runs gevent's `monkey.patch_all`, which asks for the plugins of each of its
    25 patch events with `entry_points(group=...)`, and each such call opens the metadata of
    every distribution in the environment: 0.15-0.2 s of CPU (of ~0.25 s for the whole
    patch_all) in every Locust process a run starts. The installed distributions do not change
    during an import, so the answers are the same (gevent's own plugin among them)."""
    from importlib import metadata

    read = metadata.entry_points
    every: list = []

    def entry_points(**params):
        if not every:
            every.append(read())
        return every[0].select(**params) if params else every[0]

    metadata.entry_points = entry_points
    try:
        yield
    finally:
        metadata.entry_points = read
