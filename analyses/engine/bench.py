"""Benchmark: a cold run of every analysis into an empty cache, then a warm run with nothing stale.

Each run is a separate `python -m analyses run` process, so the times include
start-up and the peak memory (max resident set size, from wait4) is that run's own.
Targets on the 2-core reference machine: warm run < 2 s, peak memory < 2 GB.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time


def timed_run(args: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS in MB) of one child process; raises if it fails."""
    start = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", "analyses", "run", "--quiet", *args], stdout=subprocess.DEVNULL)
    _, code, usage = os.wait4(child.pid, 0)
    elapsed = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(code)
    if child.returncode:
        raise SystemExit(f"benchmark run failed with exit code {child.returncode}")
    return elapsed, usage.ru_maxrss / 1024


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="analyses-bench-") as tmp:
        args = ["--root", tmp]
        cold = timed_run(args)
        warm = timed_run(args)
    print(f"{'run':6s} {'wall (s)':>9s} {'peak RSS (MB)':>14s}")
    for name, (seconds, mb) in (("cold", cold), ("warm", warm)):
        print(f"{name:6s} {seconds:9.2f} {mb:14.0f}")
    ok = warm[0] < 2 and max(cold[1], warm[1]) < 2048
    print("targets (warm < 2 s, peak < 2 GB):", "met" if ok else "NOT met")
    return 0 if ok else 1
