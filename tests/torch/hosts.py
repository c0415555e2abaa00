"""Several "hosts" on one machine, for the multi-node tests.

The ranks of each host share one mount and UTS namespace in which the socket
directory is a private tmpfs, so file descriptors cannot pass between hosts and
symmwin must detect that by itself (no SYMMWIN_HOST_ID). Every namespace is given the
same hostname, so the hostname cannot be what decides. The network namespace is
shared: the TCPStore and gloo on loopback reach every rank.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

HOSTNAME = "node"


def namespaces_unavailable() -> str | None:
    """Why mount + UTS namespaces cannot be made here, or None when they can."""
    for tool in ("unshare", "nsenter"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    probe = subprocess.run(
        ["unshare", "--mount", "--uts", "--propagation", "private", "sh", "-c",
         "mount -t tmpfs none /mnt && hostname probe"],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        return f"cannot make mount+UTS namespaces with a tmpfs (needs root or CAP_SYS_ADMIN): {probe.stderr.strip()}"
    return None


class Hosts:
    """One namespace holder process per host; `enter(host)` prefixes a command so that
    it runs inside that host's namespaces. With `hosts` None it does nothing."""

    def __init__(self, tmp: Path, hosts: list[str] | None):
        self.socket_dir = tmp / "sock"
        self._tmp = tmp
        self._hosts = sorted(set(hosts)) if hosts else []
        self._holders: dict[str, subprocess.Popen] = {}

    def __enter__(self) -> "Hosts":
        if not self._hosts:
            return self
        self.socket_dir.mkdir(mode=0o700)
        try:
            for host in self._hosts:
                ready = self._tmp / f"host-{host}.ready"
                script = 'mount -t tmpfs -o mode=0700 "symmwin-$2" "$1" && hostname "$3" && touch "$4" && exec sleep 3600'
                self._holders[host] = subprocess.Popen(
                    ["unshare", "--mount", "--uts", "--propagation", "private", "sh", "-c", script,
                     "sh", str(self.socket_dir), host, HOSTNAME, str(ready)]
                )
                deadline = time.monotonic() + 10
                while not ready.exists():
                    if self._holders[host].poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"could not make the namespaces of host {host}")
                    time.sleep(0.01)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def enter(self, host: str) -> list[str]:
        """Command prefix that runs a program in `host`'s mount and UTS namespaces."""
        return ["nsenter", "-t", str(self._holders[host].pid), "-m", "-u", "--"]

    def __exit__(self, *exc) -> None:
        for holder in self._holders.values():
            if holder.poll() is None:
                holder.kill()
            holder.wait()
        self._holders.clear()
