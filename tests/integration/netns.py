"""Two "nodes" on the one test host: a network namespace each, joined by a veth pair, with host names of their own.

Where the test runs as root with `ip` and `unshare`, each node is a network
namespace of the test's own (10.x addresses only inside them, a default route
over the veth) and every command it runs gets a host name of its own
(`unshare --uts`): processes talk over their own addresses as on two machines.
Each namespace has its own /etc/hosts naming both nodes and a resolv.conf with no
name server (`ip netns exec` mounts /etc/netns/NAME/* over /etc): the host's name
server is out of reach over the veth, and each lookup of a node's name waited for
it to time out (6.3 s each; a two-node torchrun job took 53 s of wall, ~25 of them
in lookups before the ranks started and after they ended).
Elsewhere both nodes are 127.0.0.1 and tell themselves apart by PITSTOP_NODE.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Nodes:
    """Two nodes: (command prefix, address, env) each; namespaces and what still runs in them removed on `close`."""

    opened = 0

    def __init__(self, subnet: str = "10.203.77") -> None:
        self.names: list[str] = []
        self.link = ""
        self.subnet = subnet
        self.isolated = False

    def open(self) -> None:
        Nodes.opened += 1  # a module's nodes may stand while a test makes its own: names of their own
        tag = f"{os.getpid() % 100000}{Nodes.opened % 10}"
        if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("unshare") is None:
            return
        a, b, self.link = f"pstna{tag}", f"pstnb{tag}", f"pstv{tag}"
        self.names = [a, b]
        steps = [["ip", "netns", "add", a], ["ip", "netns", "add", b],
                 ["ip", "link", "add", f"{self.link}a", "type", "veth", "peer", "name", f"{self.link}b"]]
        for i, name in enumerate(self.names):
            dev = f"{self.link}{'ab'[i]}"
            steps += [["ip", "link", "set", dev, "netns", name],
                      ["ip", "-n", name, "addr", "add", f"{self.address(i, True)}/24", "dev", dev],
                      ["ip", "-n", name, "link", "set", dev, "up"], ["ip", "-n", name, "link", "set", "lo", "up"],
                      # A program that finds its own address by routing (Ray's node address: a UDP connect to
                      # 8.8.8.8, nothing sent) gets 127.0.0.1 in a namespace with no default route.
                      ["ip", "-n", name, "route", "add", "default", "dev", dev]]
        for step in steps:
            if subprocess.run(step, capture_output=True).returncode != 0:
                self.close()
                return
        hosts = "127.0.0.1 localhost\n" + "".join(f"{self.address(i, True)} node-{i}\n" for i in range(2))
        try:
            for name in self.names:
                etc = f"/etc/netns/{name}"
                os.makedirs(etc, exist_ok=True)
                with open(f"{etc}/hosts", "w") as f:
                    f.write(hosts)
                with open(f"{etc}/resolv.conf", "w") as f:
                    f.write("options timeout:1 attempts:1\n")  # no name server: a lookup fails at once
        except OSError:
            self.close()
            return
        self.isolated = True

    def close(self) -> None:
        """Kill what still runs in the namespaces (daemons such as Ray's raylets), then delete them."""
        for name in self.names:
            pids = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            subprocess.run(["ip", "netns", "delete", name], capture_output=True)
            shutil.rmtree(f"/etc/netns/{name}", ignore_errors=True)
        self.names = []

    def launcher(self, i: int, command: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
        """`command` as node i runs it: in its namespace under its own host name, or with PITSTOP_NODE."""
        env = dict(env)
        if not self.isolated:
            env["PITSTOP_NODE"] = f"node-{i}"
            return command, env
        # gloo binds to the address its host name resolves to, and node-i resolves to none
        env["GLOO_SOCKET_IFNAME"] = f"{self.link}{'ab'[i]}"
        script = f"hostname node-{i} && exec \"$@\""
        return ["ip", "netns", "exec", self.names[i], "unshare", "--uts", "sh", "-c", script, "sh", *command], env

    def address(self, i: int, isolated: bool | None = None) -> str:
        return f"{self.subnet}.{i + 1}" if (self.isolated if isolated is None else isolated) else "127.0.0.1"
