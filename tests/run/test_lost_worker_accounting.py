"""A lost load worker, accounted in-process: its requests in flight (started, reported, never
ended) are what it abandoned, per level; a trace level stops waiting for the share it never
sent; a worker forked by this process is found lost by its process; one that only stalled and
comes back has each request counted once; run.json's entry names it."""

from __future__ import annotations

import subprocess
import sys
import time

from vllm_load.load_kinds import CONCURRENCY, TRACE, Level
from vllm_load.run.measured_set import LevelFollower
from vllm_load.run.recorder import RunRecorder
from vllm_load.run.steps import LevelPlan, LevelProgress, StepController
from vllm_load.run.worker_loss import AbandonedAtLoss, WorkerProcess, child_exited
from vllm_load.run_format.lost_workers import LostWorker, lost_workers


def follower_with(levels: int, selected: int) -> LevelFollower:
    follower = LevelFollower()
    for _ in range(levels):
        follower.level_started(selected)
    return follower


def test_a_lost_worker_abandons_the_requests_it_had_started_and_not_ended():
    follower = follower_with(2, selected=6)
    for ts in (1.0, 2.0, 3.0):
        follower.started(0, ts, "w1")
        follower.started(0, ts + 0.5, "w2")
    follower.started(1, 10.0, "w1")
    follower.started(1, 10.0, "w1")  # two requests of one process started at one instant
    follower.ended(0, 1.0, "w1")
    follower.ended(0, 2.0, "w1")
    follower.ended(0, 1.5, "w2")
    follower.abandoned("w1", [3.0, 7.0])  # stopped by the test (7.0: due, never sent)
    assert follower.in_flight("w2") == [2.5, 3.5]
    assert follower.lost("w1") == [10.0, 10.0]  # its own, with both of one instant
    assert follower.in_flight("w1") == [] and follower.lost("w1") == []  # (counted once)
    # the lost worker's open requests no longer hold level 1; w2's still hold level 0
    assert follower.progress(1) == LevelProgress(2, 4)
    assert follower.progress(0).open == 6 - 4  # (1, 2, 3 of w1 done; 1.5 of w2) - w2's two


def test_a_row_taken_in_before_its_start_is_not_in_flight():
    follower = follower_with(1, selected=4)
    follower.ended(0, 1.0, "local")  # a local run may add a row before the tick takes its start
    assert follower.in_flight("local") == []
    follower.started(0, 1.0, "local")
    follower.started(0, 2.0, "local")
    assert follower.in_flight("local") == [2.0]


def test_a_trace_level_stops_waiting_for_the_share_a_lost_worker_never_sent():
    segment = Level(TRACE, 0.0, 50, requests=10, duration=5.0)
    plan = LevelPlan((segment,), level_time_cap=600, measured_timeout=30)
    controller = StepController(plan)
    follower = follower_with(1, selected=10)
    progress = follower.progress
    assert controller.tick(0.0, progress) == 50
    shares = {"w1": len(range(0, 10, 2)), "w2": len(range(1, 10, 2))}  # 5 and 5
    for ts in (1.0, 2.0, 3.0):  # w1 sent three of its five and got two answers
        follower.started(0, ts, "w1")
    follower.ended(0, 1.0, "w1")
    follower.ended(0, 2.0, "w1")
    for ts in (1.5, 2.5, 3.5, 4.5, 5.5):  # w2 sends its whole share, and all of it ends
        follower.started(0, ts, "w2")
        follower.ended(0, ts, "w2")
    assert controller.tick(6.0, progress) == 50  # waits for w1's last two, till its time cap
    assert follower.lost("w1") == [3.0]
    assert follower.forgo(0, "w1", shares["w1"]) == 2  # two of its share never sent
    assert follower.progress(0) == LevelProgress(8, 0, unsent=2)
    assert controller.tick(6.2, progress) is None  # it ends now (nothing in flight: the end)
    ended = [c for c in controller.take_changes() if c.kind == "end"]
    assert [(c.level, c.reason) for c in ended] == [(0, "target_reached")]


def test_a_worker_forked_here_is_lost_when_its_process_exits():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert not child_exited(child.pid)
        child.kill()
        deadline = time.monotonic() + 10
        while not child_exited(child.pid):  # a zombie until reaped: exited already
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        child.kill()
        child.wait()
    assert child_exited(child.pid)  # reaped (gevent reaps the ones Locust forks): gone
    me = WorkerProcess.this_one()
    assert not me.is_my_child()  # this process's parent is not itself
    ours = WorkerProcess(me.host, child.pid, ppid=me.pid)
    assert ours.is_my_child() and WorkerProcess.reported(ours.report()) == ours
    assert WorkerProcess.reported({"host": "h", "pid": "12"}) is None  # damaged: not trusted
    assert WorkerProcess.reported(None) is None


def test_a_run_json_entry_names_the_worker_and_what_went_with_it():
    run = {
        "workers_lost": [
            {
                "worker": "vm_1f",
                "lost_at": 1.0,
                "level": 2,
                "host": "vm",
                "pid": 4242,
                "found": "process_exited",
                "in_flight": 3,
                "unsent": 40,
            },
            {"worker": "vm_2e", "lost_at": 2.0, "level": 0, "in_flight": 1},
            "host_old",  # older runs list bare ids
        ]
    }
    full, counted, bare = lost_workers(run)
    assert full.named() == "worker vm_1f (host vm, pid 4242)" and full.level == 2
    assert (
        full.what_was_lost() == "3 requests in flight abandoned, 40 of its trace share never sent"
    )
    assert counted.named() == "worker vm_2e"
    assert counted.what_was_lost() == "1 request in flight abandoned"
    assert bare == LostWorker("host_old", None) and bare.what_was_lost() == ""
    assert lost_workers({"workers_lost": "nonsense"}) == [] and lost_workers({}) == []


def test_a_stalled_worker_that_comes_back_has_each_request_counted_once():
    ledger = AbandonedAtLoss()
    ledger.add("w1", [1.0, 2.0, 2.0])  # in flight when it was found missing: counted abandoned
    # back, it reports two of them abandoned itself (its users were moved away) and another one
    assert ledger.not_counted("w1", [2.0, 3.0]) == [3.0]
    assert ledger.not_counted("w2", [1.0]) == [1.0]  # another worker's are its own
    assert ledger.ended("w1", 1.0)  # a row for one counted: it is no longer abandoned
    assert not ledger.ended("w1", 1.0) and not ledger.ended("w2", 2.0)
    assert ledger.not_counted("w1", [2.0, 2.0]) == [2.0]  # (the second of one instant, once)


def test_the_recorder_takes_back_an_abandoned_request_that_got_its_row(tmp_path):
    recorder = RunRecorder(str(tmp_path / "run"), {})
    recorder.start_level(0, Level(CONCURRENCY, 4.0, 4), 10.0, 4, 44, 600.0)
    recorder.start_level(1, Level(CONCURRENCY, 8.0, 8), 20.0, 8, 48, 600.0)
    recorder.add_abandoned([11.0, 12.0, 21.0])
    recorder.add_abandoned([12.0, 21.0], -1)
    recorder.write_run_json()
    assert recorder.run_info["requests_abandoned"] == {"total": 1, "by_level": {"0": 1}}
    recorder.close("completed")


def test_a_worker_lost_while_no_level_ran_cost_no_level_its_load():
    from vllm_load.cli.run_end import lost_workers_line
    from vllm_load.run.end_summary import lost_by_level

    during = {"worker": "vm_1f", "level": 1, "in_flight": 2, "during_level": True}
    after = {"worker": "vm_2e", "level": 1, "in_flight": 0, "during_level": False}
    older = {"worker": "vm_3d", "level": 0}  # recorded before the field: taken as during
    run = {"workers_lost": [during, after, older]}
    lost = lost_workers(run)
    assert [w.held_less() for w in lost] == [1, None, 0]
    assert [w.when() for w in lost] == [
        "during level 1",
        "after level 1 had ended",
        "during level 0",
    ]
    assert lost_by_level(lost) == {
        1: "worker vm_1f, 2 requests in flight abandoned",
        0: "worker vm_3d",
    }
    # the exit status names the losses that cost a level its load, and only those
    line = lost_workers_line(run)
    assert "vm_1f was lost during level 1" in line and "vm_3d" in line
    assert "vm_2e" not in line
    assert lost_workers_line({"workers_lost": [after]}) == ""
    assert LostWorker.of({**after, "during_level": "no"}).during_level  # damaged: not trusted
