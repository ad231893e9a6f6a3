"""A report's charts drawn in two processes (`report.parallel`): every piece's result in order,
whichever process ran it, the same charts as drawn in one, and a piece's exception raised in
the caller."""

from __future__ import annotations

import os

import pytest

from vllm_load.report import parallel, render
from vllm_load.report.model import build_report_data
from vllm_load.run_format.synthetic import SyntheticRun, write_synthetic_run
from vllm_load.run_format.synthetic_personas import Persona

two_cores = pytest.mark.skipif(
    parallel.usable_cores() < 2 or not hasattr(os, "fork"), reason="one usable core: no child"
)


@two_cores
def test_results_come_in_order_half_of_them_from_a_child():
    pids = parallel.in_two_processes([os.getpid for _ in range(5)])
    assert pids[0::2] == [os.getpid()] * 3  # the even places here
    assert len(set(pids[1::2])) == 1 and pids[1] != os.getpid()  # the odd ones in one child
    assert parallel.in_two_processes([lambda i=i: i * i for i in range(7)]) == [
        i * i for i in range(7)
    ]
    assert parallel.in_two_processes([]) == [] and parallel.in_two_processes([lambda: 3]) == [3]


class Unpicklable(Exception):
    def __reduce__(self):
        raise TypeError("not picklable")


@two_cores
@pytest.mark.parametrize("where", [0, 1])
def test_a_piece_that_raises_raises_here_whichever_process_ran_it(where):
    def boom():
        raise ValueError("no chart")

    pieces = [lambda: 1, lambda: 2, lambda: 3]
    pieces[where] = boom
    with pytest.raises(ValueError, match="no chart"):
        parallel.in_two_processes(pieces)

    def odd():
        raise Unpicklable("odd")

    pieces[1] = odd
    with pytest.raises((parallel.PieceFailed, ValueError)) as raised:
        parallel.in_two_processes(pieces)
    if where == 1:
        assert "Unpicklable" in str(raised.value)  # told as text, with its traceback


def test_on_one_core_everything_runs_here(monkeypatch):
    monkeypatch.setattr(parallel, "usable_cores", lambda: 1)
    assert parallel.in_two_processes([os.getpid, os.getpid]) == [os.getpid()] * 2


@two_cores
def test_the_charts_drawn_in_two_processes_are_those_drawn_in_one(tmp_path, monkeypatch):
    spec = SyntheticRun(
        levels=(4, 16),
        requests_per_level=40,
        personas=(Persona("ChatUser", 2.0), Persona("AgentUser", 1.0, 1.2, turns=3)),
        chunk_marks=True,
        scrape_interval=1.0,
    )
    data = build_report_data([write_synthetic_run(str(tmp_path), spec)])
    two = list(render.drawn_charts(data))
    monkeypatch.setattr(parallel, "usable_cores", lambda: 1)
    one = list(render.drawn_charts(data))
    assert len(two) == len(one) == 4 + 1 + len(render.RUN_CHARTS)
    assert [c and c.png_base64 for c in two] == [c and c.png_base64 for c in one]
    assert sum(c is not None for c in one) >= 7  # overview, distributions, timeline, personas
