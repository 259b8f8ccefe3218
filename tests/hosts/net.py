"""A private network of hosts on this machine: a bridge with its own address
(where the database listens) and one network namespace per host, joined to
the bridge by a veth pair, each with an address of its own.

Every name carries a tag made for the run (``fk<6 hex>``), so runs side by
side never touch each other's devices, and ``close()`` removes all of them
(namespaces, and with them their veth ends, then the bridge), whatever
happened before. Addresses are in 10.X.Y.0/24, a subnet that no interface
of this machine uses; traffic goes only to the bridge and the namespaces.

A host is cut from the database by nftables rules in its own namespace
(``cut``: every packet to and from the database's port dropped, as behind a
failed link; ``lossy``: a share of them), and healed by deleting them.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import random
import secrets
import shutil
import subprocess
from collections.abc import Sequence

NEEDED = ("ip", "nft")
CUT_TABLE = "foliko_harness"


def problem() -> str | None:
    """None when this machine can build the network, else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    missing = [tool for tool in NEEDED if shutil.which(tool) is None]
    if missing:
        return f"{' and '.join(missing)} not installed (apt-get install iproute2 nftables)"
    probe = f"fkprobe{secrets.token_hex(3)}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"cannot make a network namespace: {made.stderr.strip()}"
    try:
        table = subprocess.run(
            ["ip", "netns", "exec", probe, "nft", "add", "table", "inet", CUT_TABLE],
            capture_output=True,
            text=True,
        )
        if table.returncode != 0:
            return f"nftables does not work in a namespace: {table.stderr.strip()}"
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(list(args), capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {done.stderr.strip()}")
    return done


def _free_subnet() -> ipaddress.IPv4Network:
    used = run("ip", "-4", "-o", "addr", "show").stdout
    taken = [ipaddress.ip_interface(word).network for word in used.split() if "/" in word]
    for _ in range(200):
        net = ipaddress.ip_network(f"10.{random.randint(64, 250)}.{random.randint(0, 255)}.0/24")
        if not any(net.overlaps(other) for other in taken):
            return net
    raise RuntimeError("no free 10.x.y.0/24 subnet on this machine")


class Network:
    def __init__(self, hosts: int):
        self.tag = f"fk{secrets.token_hex(3)}"
        self.subnet = _free_subnet()
        addresses = list(self.subnet.hosts())
        self.bridge = f"{self.tag}br"
        self.bridge_ip = str(addresses[0])
        self.namespaces = [f"{self.tag}h{i}" for i in range(hosts)]
        self.addresses = [str(addresses[10 + i]) for i in range(hosts)]
        self._made: list[tuple[str, str]] = []
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def _build(self) -> None:
        run("ip", "link", "add", self.bridge, "type", "bridge")
        self._made.append(("link", self.bridge))
        run("ip", "addr", "add", f"{self.bridge_ip}/24", "dev", self.bridge)
        run("ip", "link", "set", self.bridge, "up")
        for i, (namespace, address) in enumerate(zip(self.namespaces, self.addresses, strict=True)):
            outside, inside = f"{self.tag}v{i}", f"{self.tag}n{i}"
            run("ip", "netns", "add", namespace)
            self._made.append(("netns", namespace))
            run("ip", "link", "add", outside, "type", "veth", "peer", "name", inside)
            self._made.append(("link", outside))
            run("ip", "link", "set", outside, "master", self.bridge)
            run("ip", "link", "set", outside, "up")
            run("ip", "link", "set", inside, "netns", namespace)
            self.exec(i, "ip", "link", "set", inside, "name", "eth0")
            self.exec(i, "ip", "addr", "add", f"{address}/24", "dev", "eth0")
            self.exec(i, "ip", "link", "set", "eth0", "up")
            self.exec(i, "ip", "link", "set", "lo", "up")

    def prefix(self, host: int) -> list[str]:
        """The command prefix that runs a program on ``host``."""
        return ["ip", "netns", "exec", self.namespaces[host]]

    def exec(self, host: int, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return run(*self.prefix(host), *args, check=check)

    def cut(self, host: int, port: int, loss_percent: int = 100) -> None:
        """Drop ``loss_percent`` % of the packets between ``host`` and the
        database's ``port`` on the bridge, both ways."""
        drop = "drop" if loss_percent >= 100 else f"numgen random mod 100 < {loss_percent} drop"
        rules = (
            f"table inet {CUT_TABLE} {{\n"
            "  chain out {\n    type filter hook output priority 0;\n"
            f"    ip daddr {self.bridge_ip} tcp dport {port} {drop}\n  }}\n"
            "  chain in {\n    type filter hook input priority 0;\n"
            f"    ip saddr {self.bridge_ip} tcp sport {port} {drop}\n  }}\n}}\n"
        )
        self.heal(host)
        done = subprocess.run(
            [*self.prefix(host), "nft", "-f", "-"], input=rules, capture_output=True, text=True
        )
        if done.returncode != 0:
            raise RuntimeError(f"nft on host {host}: {done.stderr.strip()}")

    def heal(self, host: int) -> None:
        self.exec(host, "nft", "delete", "table", "inet", CUT_TABLE, check=False)

    def close(self) -> None:
        for kind, name in reversed(self._made):
            if kind == "netns":
                # processes still in it keep it alive: end them first
                pids = run("ip", "netns", "pids", name, check=False).stdout.split()
                for pid in pids:
                    _kill(int(pid))
                run("ip", "netns", "del", name, check=False)
            else:
                run("ip", "link", "del", name, check=False)
        self._made.clear()

    def leftovers(self) -> Sequence[str]:
        """Devices and namespaces of this run still on the machine (none after close)."""
        links = run("ip", "-o", "link", "show").stdout
        spaces = run("ip", "netns", "list").stdout
        return [word for word in (links + spaces).split() if word.startswith(self.tag)]


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, 9)
