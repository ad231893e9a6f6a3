"""The simulator's --trace file: whole lines, readable while torn at the end, one per streamed request."""

import json
import urllib.request

from support.host_wait import HostWait, within

from vllm_load.sim.child import SimulatorProcess
from vllm_load.sim.trace import TraceRecord, TraceWriter, read_trace


def test_writer_batches_whole_lines_and_reader_skips_a_torn_tail(tmp_path):
    path = str(tmp_path / "t.jsonl")
    first, second = TraceWriter(path), TraceWriter(path)  # two server processes, one file
    for i in range(3000):  # several 64 KB batches
        (first if i % 2 else second).write(
            TraceRecord(f"r{i}", 1.0 + i, [2.0 + i, 3.0 + i], 4.0 + i)
        )
    first.close()
    second.close()
    with open(path, "ab") as fh:
        fh.write(b'{"id": "torn", "rece')  # a server killed mid-write
    records = read_trace(path)
    assert len(records) == 3000 and "torn" not in records
    assert records["r7"] == TraceRecord("r7", 8.0, [9.0, 10.0], 11.0)


def _stream(url: str, headers: dict) -> bytes:
    body = json.dumps(
        {
            "model": "sim-llama-8b",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 5,
            "ignore_eos": True,
            "stream": True,
        }
    ).encode()
    req = urllib.request.Request(
        url + "/v1/chat/completions",
        data=body,
        headers={"Content-Type": "application/json", **headers},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return resp.read()


def test_sim_traces_each_token_write_under_the_request_id_header(tmp_path):
    path = str(tmp_path / "trace.jsonl")
    with SimulatorProcess("--ttft", "0.05", "--itl", "0.01", "--trace", path) as sim:
        host = HostWait(simulator=sim.proc.pid)
        before = host.read()
        _stream(sim.url, {"X-Request-Id": "mine-1"})
        after = host.read()
        body = _stream(sim.url, {})
    records = read_trace(path)
    assert set(records) == {"mine-1", json.loads(body.split(b"data: ", 2)[1].split(b"\n")[0])["id"]}
    rec = records["mine-1"]
    assert len(rec.tokens) == 5 and rec.tokens == sorted(rec.tokens)
    # TTFT 50 ms: 45-200 ms, where the host did not keep the simulator waiting longer (a write
    # is late by at most its process's run-queue wait)
    within(rec.tokens[0] - rec.received, 0.1225, 0.0775, before, after, "first token write")
    # The simulator keeps to its schedule (a late write is followed by a short gap), so the
    # ITL shows in the span of the four gaps, not in each gap on a busy 2-core machine: 35-200 ms
    within(rec.tokens[-1] - rec.tokens[0], 0.1175, 0.0825, before, after, "four token gaps")
    assert rec.tokens[-1] <= rec.end
