"""Test hosts on one machine: network namespaces joined by a bridge (root only).

Each `TestHost` is a namespace with its own address on a private test subnet that exists only
inside namespaces this code created; the bridge lives in a namespace of its own, so the
machine's own network is never touched. Everything is removed on exit.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

SUBNET = "10.231.{}.{}"


def netns_available() -> str | None:
    """None if namespaces can be made here, else the reason they cannot."""
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    if not shutil.which("ip"):
        return "needs iproute2's ip command"
    probe = f"vlprobe{os.getpid()}"
    result = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if result.returncode != 0:
        return f"ip netns add failed: {result.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@dataclass
class TestHost:
    name: str
    address: str

    def command(self, *argv: str) -> list[str]:
        return ["ip", "netns", "exec", self.name, *argv]


class NetnsLab:
    """A bridge and hosts: `with NetnsLab(["target", "master", "w1"]) as net: net.hosts["target"]`."""

    def __init__(self, host_names: list[str]) -> None:
        tag = os.getpid() % 250 + 1
        self.prefix = f"vl{os.getpid()}"
        self.bridge_ns = f"{self.prefix}br"
        self.hosts = {
            name: TestHost(f"{self.prefix}{name}", SUBNET.format(tag, index + 10))
            for index, name in enumerate(host_names)
        }
        self._made: list[str] = []

    def __enter__(self) -> "NetnsLab":
        try:
            _ip("netns", "add", self.bridge_ns)
            self._made.append(self.bridge_ns)
            _ip("-n", self.bridge_ns, "link", "add", "br0", "type", "bridge")
            _ip("-n", self.bridge_ns, "link", "set", "br0", "up")
            for index, host in enumerate(self.hosts.values()):
                _ip("netns", "add", host.name)
                self._made.append(host.name)
                outer, inner = f"{self.prefix[:8]}o{index}", f"{self.prefix[:8]}i{index}"
                _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
                _ip("link", "set", outer, "netns", self.bridge_ns)
                _ip("link", "set", inner, "netns", host.name)
                _ip("-n", self.bridge_ns, "link", "set", outer, "master", "br0")
                _ip("-n", self.bridge_ns, "link", "set", outer, "up")
                _ip("-n", host.name, "link", "set", inner, "name", "eth0")
                _ip("-n", host.name, "addr", "add", f"{host.address}/24", "dev", "eth0")
                _ip("-n", host.name, "link", "set", "eth0", "up")
                _ip("-n", host.name, "link", "set", "lo", "up")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        for name in reversed(self._made):  # deleting a namespace removes its veth ends too
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        self._made.clear()
