"""What the machine is doing while a benchmark measures: CPU seconds of a process, of this
process and of every core (Linux /proc), the load average, waiting for an idle machine."""

from __future__ import annotations

import os
import time

_CLK_TCK = os.sysconf("SC_CLK_TCK")


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of every thread of ``pid`` so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK  # utime, stime


def system_busy_seconds() -> float:
    """CPU seconds all cores have spent busy since boot (Linux /proc/stat), to tell how much
    other processes took during a measurement."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq + steal) / _CLK_TCK


def wait_for_quiet(max_wait: float, *, threshold: float = 0.25, window: float = 2.0) -> str:
    """Wait (up to ``max_wait`` seconds) until the machine is idle: less than ``threshold``
    cores busy over ``window`` seconds, everything else running on it included. Returns a
    note for the report."""
    if max_wait <= 0:
        return ""
    t0 = time.monotonic()
    while True:
        b0 = system_busy_seconds()
        time.sleep(window)
        busy = (system_busy_seconds() - b0) / window
        waited = time.monotonic() - t0
        if busy < threshold:
            return f"waited {waited:.0f} s for an idle machine" if waited > window * 1.5 else ""
        if waited >= max_wait:
            return f"machine still busy ({busy:.1f} cores) after waiting {waited:.0f} s"


def self_cpu_seconds() -> float:
    """CPU seconds of this process, all threads (librdkafka's included)."""
    t = os.times()
    return t.user + t.system


def load_average() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())
