"""One address lookup per load process, shared by every user's connections.

Runs in a subprocess: gevent (which vllm_load.client.users.llm_user needs) must not be imported into pytest.
"""

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import gevent, gevent.socket, socket
    from geventhttpclient import HTTPClient
    from vllm_load.client.context import AddressCache
    from vllm_load.compat.geventhttpclient import pool_addresses

    calls = []
    real = gevent.socket.getaddrinfo
    def counting(host, *args):
        calls.append(host)
        gevent.sleep(0.05)  # a slow resolver: every user asks while the first lookup is pending
        if host == "no-such-host.invalid":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, *args)
    gevent.socket.getaddrinfo = counting

    cache = AddressCache()
    clients = [HTTPClient.from_url("http://localhost:9/", concurrency=1) for _ in range(200)]
    for client in clients:
        cache.install(client)
    found = gevent.joinall([gevent.spawn(pool_addresses, c) for c in clients], raise_error=True)
    assert len(calls) == 1, calls
    assert all(g.value == found[0].value and g.value for g in found)
    assert {info[4][1] for info in found[0].value} == {9}

    bad = HTTPClient.from_url("http://no-such-host.invalid:8000/")
    cache.install(bad)
    for attempt in range(2):  # a failed lookup is not kept: each connection asks again
        try:
            pool_addresses(bad)
        except socket.gaierror:
            pass
        else:
            raise AssertionError("resolved a name that does not exist")
    assert calls.count("no-such-host.invalid") == 2, calls
    print("ok")
""")


def test_all_users_of_a_process_share_one_lookup_and_failures_are_retried():
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ok"
