"""What the benches share: the peak memory of this process tree, and the load-average line they print."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

import psutil

# A process's role in the tree (None: not counted), from the process and this one (the bench's own).
Role = Callable[[psutil.Process, psutil.Process], str | None]


def load_average() -> str:
    """The 1, 5 and 15 min load averages as the benches print them: ``"1.9, 1.4, 1.2"``."""
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


def load_average_line(when: str = "") -> str:
    """``"load average (1, 5, 15 min)[ when]: 1.9, 1.4, 1.2"``: the line a bench prints beside its results."""
    return f"load average (1, 5, 15 min){f' {when}' if when else ''}: {load_average()}"


def jvm_or_python(process: psutil.Process, _me: psutil.Process) -> str:
    return "jvm" if process.name() == "java" else "python"


class PeakRss:
    """Samples the memory of this process and its descendants every ``interval_s`` on a thread (a ``with``
    block), keeping the peaks.

    Each process gets a role (``role``; None leaves it out), each role a kind (``kind``; the role itself by
    default). Kept: ``peak`` (RSS summed over the counted processes), ``breakdown`` (RSS per kind) and ``roles``
    (processes and RSS per role) at that peak, ``peaks`` (each kind's own peak, over the samples), and with
    ``pss`` the peak of the summed PSS (shared pages divided among the processes that map them) and
    ``peaks_pss`` (each kind's own peak PSS). With ``cpu``, :attr:`cpu_seconds` gives the CPU seconds (user +
    system) each role's processes had used at their last sample.
    """

    def __init__(
        self,
        *,
        role: Role = jvm_or_python,
        kind: Callable[[str], str] | None = None,
        interval_s: float = 0.2,
        pss: bool = False,
        cpu: bool = False,
    ) -> None:
        self._role, self._kind, self._interval_s, self._pss = role, kind or (lambda r: r), interval_s, pss
        self._cpu = cpu
        self.peaks_pss: dict[str, int] = {}
        # pid -> (role, CPU seconds at its last sample): a process that ended keeps its last figure.
        self._cpu_seen: dict[int, tuple[str, float]] = {}
        self.peak = self.peak_pss = 0
        self.breakdown: dict[str, int] = {}
        self.roles: dict[str, tuple[int, int]] = {}
        self.peaks: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            self._sample(me)
            self._stop.wait(self._interval_s)

    def _sample(self, me: psutil.Process) -> None:
        total, total_pss = 0, 0
        parts: dict[str, int] = {}
        parts_pss: dict[str, int] = {}
        roles: dict[str, tuple[int, int]] = {}
        for process in [me, *me.children(recursive=True)]:
            try:
                role = self._role(process, me)
                if role is None:
                    continue
                if self._pss:
                    memory = process.memory_full_info()
                    total_pss += memory.pss
                else:
                    memory = process.memory_info()
                if self._cpu:
                    times = process.cpu_times()
                    self._cpu_seen[process.pid] = (role, times.user + times.system)
            except psutil.Error:
                continue
            kind = self._kind(role)
            if self._pss:
                parts_pss[kind] = parts_pss.get(kind, 0) + memory.pss
            parts[kind] = parts.get(kind, 0) + memory.rss
            count, size = roles.get(role, (0, 0))
            roles[role] = (count + 1, size + memory.rss)
            total += memory.rss
        if total > self.peak:
            self.peak, self.breakdown, self.roles = total, parts, roles
        self.peak_pss = max(self.peak_pss, total_pss)
        for kind, size in parts.items():
            self.peaks[kind] = max(self.peaks.get(kind, 0), size)
        for kind, size in parts_pss.items():
            self.peaks_pss[kind] = max(self.peaks_pss.get(kind, 0), size)

    @property
    def cpu_seconds(self) -> dict[str, float]:
        """CPU seconds per role (with ``cpu``): each process's last sample, summed over the role's processes."""
        found: dict[str, float] = {}
        for role, seconds in self._cpu_seen.values():
            found[role] = found.get(role, 0.0) + seconds
        return found

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
