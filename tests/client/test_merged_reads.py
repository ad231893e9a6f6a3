"""A reader fed several chunks in one read dates them alike, and they are counted as merged
(`stream.chunk_summary`, the requests.csv column `chunks_merged`): they cannot be dated apart."""

from types import SimpleNamespace

from support.sse_chunks import STREAM, chat_chunk

from vllm_load.client.reader import read_unstamped
from vllm_load.client.request import NEVER
from vllm_load.client.sse import SseMeter, chunk_summary


class FakeSocket:
    """Gives the reads it was made with, one per `recv`."""

    def __init__(self, reads):
        self._reads = list(reads)

    def recv(self, _size):
        return self._reads.pop(0)


def request_for(meter, floor=0.0):
    """What the readers use of a `request.MeasuredRequest`."""
    return SimpleNamespace(
        meter=meter, stall_mark=[floor], end_first_token_wait=lambda: None, cancel_at_chunk=NEVER
    )


class FakeResponse:
    """Stands for geventhttpclient's parser: a body that is its bytes, complete at [DONE]."""

    def __init__(self):
        self._body_buffer = bytearray()
        self.message_complete = False

    def feed(self, data):
        self._body_buffer += data
        if b"[DONE]" in data:
            self.message_complete = True


def test_unstamped_reader_counts_chunks_that_shared_a_read():
    content = [chat_chunk(content=f"t{i}") for i in range(5)]
    reads = [STREAM[0], content[0], b"".join(content[1:4]), content[4], b"".join(STREAM[3:])]
    meter, response = SseMeter(), FakeResponse()
    read_unstamped(request_for(meter), FakeSocket(reads), response, 0.0)
    assert response.message_complete and len(meter.chunk_times) == 6
    assert (
        chunk_summary(meter.chunk_times)[6] == 3
    )  # the three content chunks of the third read; the last read brought one


def test_one_chunk_per_read_merges_nothing():
    reads = [STREAM[0], *[chat_chunk(content=f"t{i}") for i in range(4)], b"".join(STREAM[3:])]
    meter = SseMeter()
    read_unstamped(request_for(meter), FakeSocket(reads), FakeResponse(), 0.0)
    assert len(meter.chunk_times) == 5 and chunk_summary(meter.chunk_times)[6] == 0


def test_stamped_reader_dates_chunks_of_one_read_alike():
    """The hub's reader on a real loopback socket: three chunks sent in one segment are one read."""
    import time

    import gevent
    from gevent import socket

    from vllm_load.client.clock import WallClock, enable_receive_timestamps
    from vllm_load.client.reader import StreamReader
    from vllm_load.compat.gevent import raw_socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    content = [chat_chunk(content=f"t{i}") for i in range(5)]

    def send():
        for piece in (
            STREAM[0] + content[0],
            b"".join(content[1:4]),
            content[4],
            b"".join(STREAM[3:]),
        ):
            server.sendall(piece)
            gevent.sleep(0.02)

    sender = gevent.spawn(send)
    try:
        assert enable_receive_timestamps(raw_socket(client))
        meter, response, floor = SseMeter(), FakeResponse(), time.perf_counter()
        StreamReader(request_for(meter, floor), client, response, floor, WallClock()).read()
        sender.join()
    finally:
        for s in (client, server, listener):
            s.close()
    assert len(meter.chunk_times) == 6 and chunk_summary(meter.chunk_times)[6] == 3
