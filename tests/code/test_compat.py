"""Each entry of vllm_load/compat against the installed library: a release that changes a private
attribute we rely on fails here, naming the library, the attribute and what changed, instead of
breaking a run silently.

gevent, geventhttpclient and Locust are checked in a subprocess per library (gevent must not be
imported into pytest); each script runs its `check_<entry>` functions and prints one JSON line of
{entry: None or what failed}. argparse is the standard library's and is checked here.
"""

import argparse
import ast
import json
import os
import re
import subprocess
import sys
from functools import lru_cache

import pytest
from support import ROOT, python_files

from vllm_load.compat.argparse import (
    DefaultsHelpFormatter,
    parser_actions,
    subcommand_parsers,
)

COMPAT = os.path.join(ROOT, "vllm_load", "compat")
THIS_FILE = os.path.realpath(__file__)  # the checks themselves read private attributes

# the scripts' shared ending: run every check, report each as None (held) or what failed
RUN_CHECKS = r"""
import json, sys
only = set(sys.argv[1:])  # (the checks this process runs; none named: every check)
results = {}
for name, check in list(globals().items()):
    if name.startswith("check_") and (not only or name[len("check_"):] in only):
        try:
            check()
            results[name[len("check_"):]] = None
        except AssertionError as e:  # (its message names the library)
            results[name[len("check_"):]] = str(e)
        except Exception as e:
            results[name[len("check_"):]] = f"{LIB}: {type(e).__name__}: {e}"
print("COMPAT " + json.dumps(results))
"""

GEVENT = r"""
import _socket
import gevent, gevent.socket
from vllm_load.compat.gevent import raw_socket, read_watcher, send_all

LIB = f"gevent {gevent.__version__}"

def expect(held, what):
    if not held:
        raise AssertionError(f"{LIB}: {what}")

def check_raw_socket():
    a, b = gevent.socket.socketpair()
    try:
        raw = raw_socket(b)
        expect(isinstance(raw, _socket.socket),
               f"socket._sock is no longer the stdlib socket under a gevent socket (got {type(raw)!r})")
        expect(raw.fileno() == b.fileno(), "socket._sock is not the same file descriptor as the gevent socket")
        expect(raw.gettimeout() == 0.0, "socket._sock is no longer non-blocking")
        try:
            raw.recvmsg(16, 0)
        except BlockingIOError:
            pass
        else:
            raise AssertionError(f"{LIB}: socket._sock.recvmsg on an empty socket did not raise BlockingIOError")
        a.sendall(b"x")
        gevent.sleep(0.01)
        expect(raw.recvmsg(16, 0)[0] == b"x", "socket._sock.recvmsg does not return what was sent")
    finally:
        a.close(); b.close()

def check_read_watcher():
    a, b = gevent.socket.socketpair()
    try:
        watcher = read_watcher(b)
        for name in ("start", "stop", "active", "priority"):
            expect(hasattr(watcher, name), f"socket._read_event has no {name!r}")
        expect(not watcher.active, "socket._read_event is active on an idle socket")
        watcher.priority = 2
        expect(watcher.priority == 2, "socket._read_event's priority cannot be set while stopped")
        watcher.priority = 0
        fired = []
        watcher.start(lambda: (fired.append(1), watcher.stop()))
        gevent.sleep(0.05)
        expect(not fired, "socket._read_event's callback ran before the socket was readable")
        a.sendall(b"x")
        with gevent.Timeout(2, False):
            while not fired:
                gevent.sleep(0.01)
        watcher.stop()
        expect(fired, "socket._read_event's callback did not run when the socket became readable")
    finally:
        a.close(); b.close()

def check_send_all():
    # one send on socket._sock takes what fits, BlockingIOError when nothing does; the rest goes
    # by gevent's sendall; a subclass (TLS) goes by its own sendall alone
    a, b = gevent.socket.socketpair()
    a.settimeout(5.0)
    try:
        send_all(a, b"x" * 700)
        expect(b.recv(4096) == b"x" * 700, "send_all did not send a small payload whole")
        big = bytes(range(256)) * 16384  # 4 MiB: more than the socket's buffers
        got = bytearray()

        def drain():
            while len(got) < len(big):
                got.extend(b.recv(1 << 20))

        reader = gevent.spawn(drain)
        send_all(a, big)
        reader.join(10)
        expect(bytes(got) == big, "send_all lost or reordered bytes of a payload larger than the "
               "socket's buffer (socket._sock.send's partial sends, then gevent's sendall)")
        sent = []

        class Wrapped(gevent.socket.socket):
            def sendall(self, data, flags=0):
                sent.append(bytes(data))

        c = Wrapped()
        send_all(c, b"tls")
        c.close()
        expect(sent == [b"tls"], "send_all did not leave a gevent socket subclass to its own sendall")
    finally:
        a.close(); b.close()

def check_close_throws_into_the_watcher_callback_owner():
    # not a name we use but a protocol StreamReader relies on: closing a socket whose read watcher
    # is started calls `throw(error)` on the object the callback is bound to (hub._cancel_wait)
    a, b = gevent.socket.socketpair()
    thrown = []

    class Owner:
        def readable(self):
            pass

        def throw(self, *exc_info):
            thrown.append(exc_info)

    watcher = read_watcher(b)
    watcher.start(Owner().readable)
    b.close()
    gevent.sleep(0.05)
    a.close()
    error = thrown[0][0] if len(thrown) == 1 else None
    error = error if isinstance(error, type) else type(error)
    expect(issubclass(error, OSError),
           "closing a socket under a started read watcher no longer calls callback.__self__.throw "
           f"with the cancel error (got {thrown!r}); StreamReader.read would hang")
"""

GEVENTHTTPCLIENT = r"""
import socket
import gevent, gevent.event, gevent.socket, geventhttpclient
from geventhttpclient import HTTPClient
from vllm_load.compat.geventhttpclient import body_buffer, discard_connection, pool_addresses, resolve_with, response_socket
from vllm_load.compat.geventhttpclient import PostHead, post, post_whole

LIB = f"geventhttpclient {geventhttpclient.__version__}"
HEADERS = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"

def expect(held, what):
    if not held:
        raise AssertionError(f"{LIB}: {what}")

class Server:
    # a chunked response whose first chunk comes with the headers and the rest on `go()`
    def __init__(self):
        self.listener = gevent.socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.port = self.listener.getsockname()[1]
        self.accepted, self.closed_by_client = 0, []
        self.rest = gevent.event.Event()
        gevent.spawn(self.serve)

    def serve(self):
        while True:
            conn, _ = self.listener.accept()
            self.accepted += 1
            gevent.spawn(self.answer, conn)

    def answer(self, conn):
        try:
            while True:
                request = b""
                while b"\r\n\r\n" not in request:
                    data = conn.recv(65536)
                    if not data:
                        return self.closed_by_client.append(True)
                    request += data
                conn.sendall(HEADERS + b"5\r\nhello\r\n")
                self.rest.wait()
                conn.sendall(b"6\r\n world\r\n0\r\n\r\n")
        except OSError:
            self.closed_by_client.append(True)
        finally:
            conn.close()

def client(port, host="127.0.0.1"):
    return HTTPClient.from_url(f"http://{host}:{port}/", concurrency=1, block_size=65536, network_timeout=5)

def read_rest(response, buf):
    sock = response_socket(response)
    while not response.message_complete:
        response.feed(sock.recv(65536))

def check_body_buffer():
    server = Server()
    response = client(server.port).get("/")
    buf = body_buffer(response)
    expect(isinstance(buf, bytearray), f"HTTPResponse._body_buffer is no longer a bytearray (got {type(buf)!r})")
    first = bytes(buf)  # what came with the headers
    del buf[:]  # the reader consumes the buffer in place
    server.rest.set()
    read_rest(response, buf)
    expect(body_buffer(response) is buf,
           "HTTPResponse._body_buffer is replaced while the body is parsed; a reader that took it "
           "once would miss the body")
    expect(bytes(buf) == b"hello world"[len(first):],
           f"HTTPResponse._body_buffer does not get the decoded body appended in place (had {first!r}, "
           f"then {bytes(buf)!r})")


def check_response_socket():
    server = Server()
    response = client(server.port).get("/")
    sock = response_socket(response)
    expect(isinstance(sock, gevent.socket.socket),
           f"HTTPResponse._sock is not the response's gevent socket mid-body (got {type(sock)!r})")
    server.rest.set()
    read_rest(response, body_buffer(response))
    expect(response_socket(response) is None,
           "HTTPResponse._sock is still set once feed() completed the message (it used to return "
           "the socket to the pool from inside feed)")

def check_discard_connection():
    server = Server()
    http = client(server.port)
    response = http.get("/")
    discard_connection(response)
    server.rest.set()
    gevent.sleep(0.1)
    expect(server.closed_by_client, "discard_connection (HTTPResponse._sock, _pool, pool.release_socket) "
           "did not close the connection")
    response.release()  # what __del__ or a `with` would do: must not put the socket back
    with gevent.Timeout(5, AssertionError(f"{LIB}: the pool's place was not freed by pool.release_socket")):
        again = http.get("/")
        read_rest(again, body_buffer(again))
    expect(server.accepted == 2, f"the request after discard_connection did not open a new connection "
           f"({server.accepted} accepted)")

def check_resolve_with():
    server = Server(); server.rest.set()
    asked = []
    def lookup(host, port):
        asked.append((host, port))
        return gevent.socket.getaddrinfo("127.0.0.1", port, 0, socket.SOCK_STREAM, socket.SOL_TCP)
    http = client(server.port, host="compat-check.invalid")
    resolve_with(http, lookup)
    try:
        response = http.get("/")
    except OSError as e:
        raise AssertionError(f"{LIB}: the connection did not use resolve_with's lookup ({e!r})")
    read_rest(response, body_buffer(response))
    expect(asked == [("compat-check.invalid", server.port)],
           "ConnectionPool no longer calls _resolve() for a new connection, or _connection_host/"
           f"_connection_port no longer hold the target (lookups: {asked!r})")
    addresses = pool_addresses(http)
    expect(len(asked) == 2 and addresses and addresses[0][4][1] == server.port,
           f"ConnectionPool._resolve() is no longer the lookup a new connection makes ({addresses!r})")

def check_post_head():
    # what PostHead + post send is what client.request sends, and the response is read alike
    listener = gevent.socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port, received = listener.getsockname()[1], []
    answer = b'{"ok": 1}'

    def serve():
        conn, _ = listener.accept()
        while True:
            data = b""
            while b"\r\n\r\n" not in data or not data.endswith(b"}"):
                more = conn.recv(65536)
                if not more:
                    return conn.close()
                data += more
            received.append(data)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(answer), answer))

    gevent.spawn(serve)
    http = client(port)
    fields = {"Content-Type": "application/json", "Accept": "application/json"}
    body = b'{"prompt": "hi"}'
    mine = post(http, PostHead(http, "/v1/completions", fields).of("id-1", len(body)), body)
    expect(mine.status_code == 200 and mine.read() == answer,
           f"post: the response was not read as client.request reads it ({mine.status_code})")
    theirs = http.request("POST", "/v1/completions", body=body, headers={**fields, "X-Request-Id": "id-1"})
    theirs.read()
    def parts(raw):
        head, _, rest = raw.partition(b"\r\n\r\n")
        line, *lines = head.split(b"\r\n")
        return line, sorted(lines), rest
    expect(len(received) == 2 and parts(received[0]) == parts(received[1]),
           "PostHead (HTTPClient._build_request with the given fields) + post no longer sends what "
           f"HTTPClient.request sends: {received!r}")

WHOLE_CASES = {
    "plain": [b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 9\r\n\r\n{"ok": 1}'],
    "in pieces": [b"HTTP/1.1 200 OK\r\nContent-Le", b"ngth: 12\r\n", b"\r\nhello", b" wor", b"ld!"],
    "chunked": [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"],
    "connection close": [b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", "close"],
    "error status": [b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 5\r\n\r\noops!"],
    "body cut short": [b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", "close"],
    "closed at once": ["close"],
    "head cut short": [b"HTTP/1.1 200 OK\r\nContent-Len", "close"],
    "more than its length": [b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA"],
    "interim answer": [b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"],
    "no length": [b"HTTP/1.1 200 OK\r\n\r\nuntil the end", "close"],
    "http/1.0": [b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", "close"],
    "bad length": [b"HTTP/1.1 200 OK\r\nContent-Length: 2x\r\n\r\nok"],
    "a control byte in a field": [b"HTTP/1.1 200 OK\r\nX-A: \x01\r\nContent-Length: 2\r\n\r\nok"],
    "a bare LF": [b"HTTP/1.1 200 OK\nContent-Length: 2\r\n\r\nok"],
    "a four-digit status": [b"HTTP/1.1 2000 OK\r\nContent-Length: 2\r\n\r\nok"],
    "an empty field name": [b"HTTP/1.1 200 OK\r\n: x\r\nContent-Length: 2\r\n\r\nok"],
    "two lengths": [b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok"],
    "a long body": [b"HTTP/1.1 200 OK\r\nContent-Length: 300000\r\n\r\n", b"x" * 300000],
}

def whole_outcome(send, pieces):
    # one POST answered with `pieces`, the way MeasuredRequest reads a whole response
    listener = gevent.socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port, accepted = listener.getsockname()[1], []

    def serve():
        while True:
            conn, _ = listener.accept()
            accepted.append(conn)
            gevent.spawn(answer, conn)

    def answer(conn):
        while True:
            data = b""
            while not data.endswith(b"}"):
                more = conn.recv(65536)
                if not more:
                    return conn.close()
                data += more
            for piece in pieces:
                if piece == "close":
                    return conn.close()
                conn.sendall(piece)
                gevent.sleep(0.01)

    server = gevent.spawn(serve)
    http = client(port)
    body = b'{"prompt": "hi"}'
    head = PostHead(http, "/v1/completions", {"Content-Type": "application/json"}).of("id-1", len(body))
    outcome, kinds = [], []
    try:
        for _ in range(2):  # the second request: on the same connection, if it was kept
            try:
                response = send(http, head, body)
                kinds.append(type(response).__name__)
                outcome.append(response.status_code)
                outcome.append(response.read())
                outcome.append(response.message_complete)
            except Exception as e:
                outcome.append(f"{type(e).__name__}: {e}")
                break
            if "close" in pieces:
                break
        outcome.append(len(accepted))
    finally:
        server.kill()
        http.close()
        listener.close()
    return outcome, kinds

def check_post_whole():
    # post_whole + read() gives what post + read() give, for each kind of whole response
    for name, pieces in WHOLE_CASES.items():
        (theirs, _), (mine, kinds) = whole_outcome(post, pieces), whole_outcome(post_whole, pieces)
        expect(mine == theirs, f"post_whole differs from post on a response with {name}: "
               f"{mine!r} against {theirs!r}")
        if name in ("plain", "in pieces", "error status", "a long body"):  # read by post_whole
            expect(kinds == ["WholeResponse", "WholeResponse"],
                   f"post_whole gave a plain response ({name}) to geventhttpclient: {kinds!r}")
"""

LOCUST = r"""
import csv, os, tempfile, time
import gevent, gevent.pool
import locust
from gevent.event import Event
from locust import User, constant, task
from locust.env import Environment
from locust.stats import PERCENTILES_TO_REPORT, StatsCSVFileWriter
from vllm_load.compat.locust import rewrite_csv_files, send_worker_report, set_worker_report_interval, user_stopping
from vllm_load.compat.locust import master_silent_for, set_master_heartbeat_timeout
from vllm_load.compat.locust import declare_missing, wait_for_final_reports
from vllm_load.compat.locust import WEB_INDEX_ENDPOINT, WEB_STATS_ENDPOINT
from vllm_load.sim.child import free_port

LIB = f"locust {locust.__version__}"

def expect(held, what):
    if not held:
        raise AssertionError(f"{LIB}: {what}")

def check_user_stopping():
    in_task, release = Event(), Event()

    class Probe(User):
        wait_time = constant(0)

        @task
        def hold(self):
            in_task.set()
            release.wait()

    user = Probe(Environment(user_classes=[Probe]))
    expect(not user_stopping(user), "a new User reads as stopping (User._state)")
    group = gevent.pool.Group()
    user.start(group)
    in_task.wait(5)
    expect(not user_stopping(user), "a running User reads as stopping (User._state)")
    stopped = user.stop(force=False)
    expect(not stopped and user_stopping(user),
           "User.stop(force=False) on a running user no longer sets User._state to "
           "LOCUST_STATE_STOPPING (and leaves it running)")
    release.set()
    group.join(timeout=5)
    expect(not group, "a User whose _state is LOCUST_STATE_STOPPING did not end after its task")

def master_and_worker():
    port = free_port()
    master = Environment(user_classes=[User]).create_master_runner("127.0.0.1", port)
    worker = Environment(user_classes=[User]).create_worker_runner("127.0.0.1", port)
    with gevent.Timeout(10, AssertionError(f"{LIB}: the worker did not connect")):
        while not master.clients:
            gevent.sleep(0.05)
    return master, worker

def check_report_interval_and_send_worker_report():
    set_worker_report_interval(0.1)
    master, worker = master_and_worker()
    reports, marker = [], []
    master.environment.events.worker_report.add_listener(lambda client_id, data: reports.append(data))
    worker.environment.events.report_to_master.add_listener(
        lambda client_id, data: data.update(marker=list(marker)))
    try:
        gevent.sleep(1.5)
        expect(len(reports) >= 4,
               f"setting locust.runners.WORKER_REPORT_INTERVAL to 0.1 s gave {len(reports)} reports in "
               "1.5 s: the worker's report loop no longer reads it")
        set_worker_report_interval(60.0)
        gevent.sleep(0.5)  # the loop's current sleep ends; its next one is 60 s
        count = len(reports)
        marker.append("now")
        send_worker_report(worker)
        gevent.sleep(0.5)
        sent = [r for r in reports[count:] if r.get("marker") == ["now"]]
        expect(len(sent) == 1 and len(reports) == count + 1,
               "WorkerRunner._send_stats() no longer fires report_to_master and sends the report "
               f"to the master at once ({len(reports) - count} reports, {len(sent)} with the marker)")
        expect("stats_total" in sent[0], "WorkerRunner._send_stats() no longer sends Locust's stats")
    finally:
        worker.quit(); master.quit()
        set_worker_report_interval(3.0)

def check_master_heartbeat_timeout():
    set_master_heartbeat_timeout(2)
    master, worker = master_and_worker()
    quits = []
    worker.quit = lambda: quits.append(master_silent_for(worker))  # what the checker calls
    try:
        gevent.sleep(2.5)  # a heartbeat a second, each answered
        silent = master_silent_for(worker)
        expect(not quits and silent is not None and 0 <= silent < 1.5,
               f"WorkerRunner.last_heartbeat_timestamp is not the time of the master's last "
               f"heartbeat ({silent!r} s ago; quit {quits!r})")
        master.greenlet.kill(block=True)  # the master answers no more heartbeats, as if killed
        killed = time.time()
        while not quits and time.time() - killed < 4.0:
            gevent.sleep(0.05)
        expect(quits and 2.0 <= quits[0] < 3.5,
               "a worker no longer quits once locust.runners.MASTER_HEARTBEAT_TIMEOUT has passed "
               f"since the master's last heartbeat (quit {quits!r} s after it)")
    finally:
        worker.greenlet.kill(block=True); master.quit()
        set_master_heartbeat_timeout(60)

def check_declare_missing():
    from locust.runners import STATE_MISSING
    master, worker = master_and_worker()
    try:
        (client_id,) = list(master.clients)
        gevent.sleep(1.5)  # heartbeats flow: the worker is not missing
        expect(master.clients[client_id].state != STATE_MISSING,
               "a worker sending heartbeats is counted missing")
        worker.greenlet.kill(block=True)  # it sends no more heartbeats, as if killed
        declare_missing(master, client_id)
        started = time.time()
        while master.clients[client_id].state != STATE_MISSING and time.time() - started < 3:
            gevent.sleep(0.05)
        waited = time.time() - started
        expect(waited < 1.5,
               "a worker whose WorkerNode.heartbeat is set below 0 is not counted missing at the "
               f"master's next heartbeat check ({waited:.1f} s)")
    finally:
        master.quit()

def check_final_reports():
    master, worker = master_and_worker()
    wait_for_final_reports(master, timeout=5.0)
    reports, marker = [], []
    master.environment.events.worker_report.add_listener(lambda client_id, data: reports.append(data))
    worker.environment.events.report_to_master.add_listener(
        lambda client_id, data: data.update(marker=list(marker)))
    stop = worker.stop

    def slow_stop():  # a worker on a busy machine: its users stop, and it reports, 1 s later
        gevent.sleep(1.0)
        stop()
        marker.append("stopped")

    worker.stop = slow_stop

    def say_quit():  # what its process does as it exits (Locust's `quitting` listener)
        worker.greenlet.join()
        worker.environment.events.quitting.fire(environment=worker.environment, reverse=True)

    gevent.spawn(say_quit)
    started = time.time()
    master.quit()
    took = time.time() - started
    expect(any(r.get("marker") == ["stopped"] for r in reports),
           f"a quitting master no longer gets a worker's last report sent 1 s after `quit` ({reports!r})")
    expect(not master.clients and took < 3,
           f"the worker's `quit` no longer removes it from MasterRunner.clients ({took:.1f} s)")

def check_rewrite_csv_files():
    environment = Environment(user_classes=[User])
    environment.create_local_runner()
    base = os.path.join(tempfile.mkdtemp(), "locust")
    writer = StatsCSVFileWriter(environment, PERCENTILES_TO_REPORT, base, full_history=False)
    stats = environment.stats
    try:
        stats.log_request("POST", "/v1/completions", 12, 5)
        stats.log_error("POST", "/v1/completions", "boom")
        rewrite_csv_files(writer)
        stats.log_request("POST", "/v1/completions", 14, 5)
        rewrite_csv_files(writer)  # a second pass replaces the first
    finally:
        writer.close_files()
    def rows(suffix):
        with open(f"{base}_{suffix}.csv", newline="") as f:
            return list(csv.reader(f))
    requests = rows("stats")
    expect(requests[0] == writer.requests_csv_columns and len(requests) == 3,
           f"StatsCSVFileWriter._requests_data_rows: _stats.csv is not one header and two rows ({requests!r})")
    expect(requests[1][1] == "/v1/completions" and requests[1][requests[0].index("Request Count")] == "2",
           f"StatsCSVFileWriter._requests_data_rows no longer writes the current stats ({requests[1]!r})")
    failures = rows("failures")
    expect(failures[0] == writer.failures_columns and len(failures) == 2 and "boom" in failures[1][2],
           f"StatsCSVFileWriter._failures_data_rows: _failures.csv is not the header and the error ({failures!r})")
    exceptions = rows("exceptions")
    expect(exceptions == [writer.exceptions_columns],
           f"StatsCSVFileWriter._exceptions_data_rows: _exceptions.csv is not its header alone ({exceptions!r})")
    history = rows("stats_history")
    expect(len(history) == 2 and history[-1][3] == "Aggregated",
           f"StatsCSVFileWriter._stats_history_data_rows(csv_writer, now) no longer appends the "
           f"Aggregated row ({history!r})")
"""

LOCUST += r"""
def check_shape_tick():
    from locust import LoadTestShape
    from locust.runners import STATE_STOPPED
    from vllm_load.compat.locust import tick_shape_every

    ticks, started = [], []

    class Idle(User):
        wait_time = constant(1)

        @task
        def idle(self):
            pass

    class Steps(LoadTestShape):
        def tick(self):
            ticks.append(len(ticks))
            n = len(ticks)
            return (2, 100) if n <= 4 else (1, 100) if n <= 8 else None

    environment = Environment(user_classes=[Idle], shape_class=Steps())
    runner = environment.create_local_runner()
    environment.shape_class.runner = runner
    real_start = runner.start
    runner.start = lambda **kw: (started.append(kw["user_count"]), real_start(**kw))
    tick_shape_every(runner, 0.05)
    runner.start_shape()
    with gevent.Timeout(5, AssertionError(f"{LIB}: the shape worker did not end its test")):
        while runner.state != STATE_STOPPED:
            gevent.sleep(0.02)
    expect(len(ticks) == 9, f"the shape was ticked {len(ticks)} times, not 9: Runner.start_shape "
           "no longer runs the runner's shape_worker attribute")
    expect(started == [2, 1], f"Runner.start was called for {started!r}, not once per new tick")
    expect(runner.shape_greenlet is None, "Runner.shape_greenlet is not cleared when a shape ends")
    runner.quit()

def check_web_ui_endpoints():
    environment = Environment(user_classes=[User])
    environment.create_local_runner()
    web_ui = environment.create_web_ui("127.0.0.1", free_port(), delayed_start=True)
    seen = {}

    @web_ui.app.after_request
    def note(response):
        from flask import request
        seen[request.path] = (request.endpoint, response)
        return response

    client = web_ui.app.test_client()
    index, stats = client.get("/"), client.get("/stats/requests")
    expect(seen.get("/", (None,))[0] == WEB_INDEX_ENDPOINT,
           f"the web UI's page is no longer the endpoint {WEB_INDEX_ENDPOINT!r} ({seen.get('/', (None,))[0]!r})")
    expect(index.status_code == 200 and "</body>" in index.get_data(as_text=True),
           "the web UI's page (webui/dist/index.html) no longer ends with </body>")
    expect(seen.get("/stats/requests", (None,))[0] == WEB_STATS_ENDPOINT,
           f"/stats/requests is no longer the endpoint {WEB_STATS_ENDPOINT!r}")
    expect(stats.is_json and "user_count" in stats.get_json(),
           "/stats/requests no longer answers JSON with the header's user_count")
"""

SCRIPTS = {"gevent": GEVENT, "geventhttpclient": GEVENTHTTPCLIENT, "locust": LOCUST}
ENTRIES = {
    "gevent": [
        "raw_socket",
        "read_watcher",
        "send_all",
        "close_throws_into_the_watcher_callback_owner",
    ],
    "geventhttpclient": [
        "body_buffer",
        "response_socket",
        "discard_connection",
        "resolve_with",
        "post_head",
        "post_whole",
    ],
    "locust": [
        "user_stopping",
        "report_interval_and_send_worker_report",
        "rewrite_csv_files",
        "web_ui_endpoints",
        "master_heartbeat_timeout",
        "shape_tick",
        "declare_missing",
        "final_reports",
    ],
}
# the compat names each check covers (a check may cover two)
COVERS = {
    "report_interval_and_send_worker_report": ["set_worker_report_interval", "send_worker_report"],
    "close_throws_into_the_watcher_callback_owner": [],
    "web_ui_endpoints": ["WEB_INDEX_ENDPOINT", "WEB_STATS_ENDPOINT"],
    "master_heartbeat_timeout": ["set_master_heartbeat_timeout", "master_silent_for"],
    "resolve_with": ["resolve_with", "pool_addresses"],
    "post_head": ["PostHead", "post"],
    "post_whole": ["post_whole", "WholeResponse"],
    "shape_tick": ["tick_shape_every"],
    "final_reports": ["wait_for_final_reports", "FINAL_REPORTS_WAIT"],
}


# Checks that mostly wait (for Locust's heartbeats and reports, seconds apart): each runs in a
# process of its own beside the library's other checks, so that the waits overlap.
APART = {"locust": [("master_heartbeat_timeout",), ("report_interval_and_send_worker_report",)]}


@lru_cache(maxsize=None)
def results(library: str) -> dict:
    apart = APART.get(library, [])
    rest = [e for e in ENTRIES[library] if all(e not in group for group in apart)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SCRIPTS[library] + RUN_CHECKS, *group],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        for group in [*apart, rest]
    ]
    found: dict = {}
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        lines = [line for line in out.splitlines() if line.startswith("COMPAT ")]
        assert proc.returncode == 0 and lines, (
            f"the {library} checks did not run (exit {proc.returncode}):\n{err[-3000:]}"
        )
        found.update(json.loads(lines[-1][len("COMPAT ") :]))
    return found


@pytest.mark.parametrize(
    "library, entry",
    [(library, entry) for library, entries in ENTRIES.items() for entry in entries],
)
def test_private_api_still_behaves(library, entry):
    found = results(library)
    assert entry in found, f"the {library} check {entry!r} did not run"
    assert found[entry] is None, found[entry]


def compat_names(module: str) -> set[str]:
    """The public names a compat module defines (read from its source: importing it here would
    import its library)."""
    with open(os.path.join(COMPAT, f"{module}.py")) as f:
        tree = ast.parse(f.read())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return {name for name in names if not name.startswith("_")}


# checked in this process, by the test_argparse_* tests below
ARGPARSE_CHECKED = {"parser_actions", "subcommand_parsers", "DefaultsHelpFormatter"}


@pytest.mark.parametrize(
    "library",
    sorted(name[:-3] for name in os.listdir(COMPAT) if name.endswith(".py") and name[0] != "_"),
)
def test_every_compat_entry_has_a_check(library):
    covered = {name for entry in ENTRIES.get(library, []) for name in COVERS.get(entry, [entry])}
    covered |= ARGPARSE_CHECKED if library == "argparse" else set()
    missing = compat_names(library) - covered
    assert not missing, f"vllm_load/compat/{library}.py entries without a check here: {missing}"


def test_argparse_parser_actions_are_the_live_actions():
    parser = argparse.ArgumentParser()
    added = parser.add_argument("--out", default="a")
    actions = parser_actions(parser)
    assert [a.dest for a in actions] == ["help", "out"] and actions[1] is added, (
        f"argparse: ArgumentParser._actions is no longer the list of added actions ({actions!r})"
    )
    actions[1].default = "b"
    assert parser.parse_args([]).out == "b", (
        "argparse: changing an action in ArgumentParser._actions no longer changes the parser"
    )


def test_argparse_subcommand_parsers():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    run = sub.add_parser("run")
    assert subcommand_parsers(parser) == {"run": run}, (
        "argparse: the subparsers action is no longer among ArgumentParser._actions with the "
        f"subcommands' parsers as its choices ({parser_actions(parser)!r})"
    )
    assert subcommand_parsers(argparse.ArgumentParser()) == {}


def test_argparse_help_string_hook():
    class Marked(DefaultsHelpFormatter):
        def help_string(self, action):
            return "[marked] " + super().help_string(action)

    parser = argparse.ArgumentParser(prog="p", formatter_class=Marked)
    parser.add_argument("--level", type=int, default=5, help="how loud")
    text = parser.format_help()
    assert "[marked] how loud (default: 5)" in " ".join(text.split()), (
        "argparse: HelpFormatter no longer asks _get_help_string(action) for each option's help, "
        f"or ArgumentDefaultsHelpFormatter's no longer appends the default:\n{text}"
    )


# an attribute with a leading underscore, and what it is read on (a name, or a call's result)
PRIVATE = re.compile(r"(?<![\w.])((?:\w+\.)*\w+|\))\._[A-Za-z]\w*")
OURS = {
    "args._module",  # cli/main.py: the subcommand's module, put there by set_defaults
    # the standard library's documented exit of a forked child (report/parallel.py), which runs
    # no cleanup of the parent's: named before the underscore meant private
    "os._exit",
    # tests looking inside vllm-load's own objects
    "arrivals._changed",  # its waits recorded, to see how an idle user sleeps to its arrival
    "buffer._rows",
    "live.timeline._seconds",
    "process._Guard",  # a server's guard made to end before its shell writes to it (a race)
    "request._classify",  # a socket error the client cannot provoke on demand (EMFILE...)
    "significance._resampled_percentiles",
}


def private_accesses(line: str) -> list[str]:
    """The private attributes read in one line of code, other than on `self` or `cls`."""
    code = line.split("#", 1)[0]
    return [
        m.group(0)
        for m in PRIVATE.finditer(code)
        if m.group(1) not in ("self", "cls") and m.group(0) not in OURS
    ]


def test_no_private_attribute_of_another_library_outside_compat():
    found = []
    for top in ("vllm_load", "tests", "bench", "locustfiles", "scripts"):
        for path in python_files(top):
            if path.startswith(COMPAT + os.sep) or os.path.realpath(path) == THIS_FILE:
                continue
            with open(path) as f:
                for number, line in enumerate(f, 1):
                    for access in private_accesses(line):
                        found.append(f"{os.path.relpath(path, ROOT)}:{number}: {access}")
    assert not found, (
        "private attributes outside vllm_load/compat (move each there, with a check in this "
        "file; add it to OURS if it is vllm-load's own):\n" + "\n".join(found)
    )


def test_the_private_access_scan_sees_what_it_must():
    assert private_accesses("runner._send_stats()") == ["runner._send_stats"]
    assert private_accesses("super()._get_help_string(action)") == [")._get_help_string"]
    assert private_accesses("x = self.environment.runner._send_stats()") == [
        "self.environment.runner._send_stats"
    ]
    assert private_accesses("self._http._connection_pool") == ["self._http._connection_pool"]
    assert private_accesses("self._http = cls._cache  # pool._resolve") == []
