"""CPU accounting of the benchmarks' processes, read from ``/proc``, and py-spy sampling.

- ``proc_cpu_s(pid)``: user + system CPU seconds of one process so far;
- ``cpu_by_process()`` / ``cpu_split(before, after, rows)``: CPU of this benchmark's Ray
  actor processes, Ray's daemons and the MariaDB servers it started, per kind, and as
  µs per row between two samples;
- ``actor_pids()``, ``ours(processes())``: which of them are which;
- ``Profiler``: ``py-spy record`` on every actor process over a timed window.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["proc_cpu_s", "processes", "ours", "cpu_by_process", "actor_pids", "Profiler",
           "cpu_split"]

_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
_GONE = object()


def proc_cpu_s(pid: int, default=_GONE) -> float:
    """User + system CPU seconds so far of process ``pid`` (its reaped children not
    counted); ``default`` when it is gone (without one, the OSError)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        if default is _GONE:
            raise
        return default
    return (int(fields[11]) + int(fields[12])) / _TICKS_PER_S


def processes() -> dict[int, tuple[int, str, float]]:
    """pid -> (ppid, argv0, CPU seconds so far) of every process on the machine."""
    tick = _TICKS_PER_S
    procs: dict[int, tuple[int, str, float]] = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv0 = f.read().split(b"\0", 1)[0].decode("utf-8", "replace")
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue
        procs[int(pid)] = (int(fields[1]), argv0, (int(fields[11]) + int(fields[12])) / tick)
    return procs


def _kind(argv0: str) -> str | None:
    """``MergerActor``, ``SqlWorkerActor``, ``raylet``, ``mariadbd``...; None: not counted."""
    if argv0.startswith("ray::"):
        return argv0[5:].split(".", 1)[0].split(":", 1)[0] or "ray-idle"
    if argv0.endswith(("mariadbd", "raylet", "gcs_server")):
        return argv0.rsplit("/", 1)[-1]  # Ray's own daemons count too: they share the cores
    return None


def ours(procs: dict[int, tuple[int, str, float]]) -> dict[int, str]:
    """pid -> kind of the counted processes descending from this one."""
    me = os.getpid()
    out = {}
    for pid, (ppid, argv0, _) in procs.items():
        kind = _kind(argv0)
        if kind is None:
            continue
        while ppid not in (me, 0, 1) and ppid in procs:
            ppid = procs[ppid][0]
        if ppid == me:
            out[pid] = kind
    return out


def cpu_by_process() -> dict[str, float]:
    """CPU seconds (user + system) so far of this benchmark's Ray actor processes, Ray's
    raylet and GCS, and the MariaDB servers (descendants of this process), summed per
    kind (``MergerActor``, ``SqlWorkerActor``, ``raylet``, ``mariadbd``...)."""
    procs = processes()
    out: dict[str, float] = {}
    for pid, kind in ours(procs).items():
        out[kind] = out.get(kind, 0.0) + procs[pid][2]
    return out


def actor_pids() -> dict[int, str]:
    """pid -> kind of this benchmark's Ray actor processes (see :func:`cpu_by_process`)."""
    return {pid: kind for pid, kind in ours(processes()).items() if "Actor" in kind}


class Profiler:
    """``py-spy record`` on every actor process while the timed window runs (``--profile``);
    :meth:`stop` writes one raw (collapsed-stack) file per process into ``out_dir`` and
    prints, per actor kind, the functions holding the most samples (self time, GIL held)."""

    def __init__(self, out_dir: Path, label: str, rate: int = 500):
        import shutil
        import subprocess

        spy = shutil.which("py-spy") or str(Path(__file__).resolve().parents[1] / ".venv/bin/py-spy")
        out_dir.mkdir(parents=True, exist_ok=True)
        self.files: dict[str, list[Path]] = {}
        self.procs = []
        for pid, kind in actor_pids().items():
            out = out_dir / f"{label}-{kind}-{pid}.txt"
            self.files.setdefault(kind, []).append(out)
            self.procs.append(subprocess.Popen(
                [spy, "record", "--pid", str(pid), "--rate", str(rate), "--format", "raw",
                 "--gil", "--nonblocking", "-o", str(out)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    def stop(self, top: int = 12) -> None:
        import signal

        procs, self.procs = self.procs, []
        if not procs:  # stopped already
            return
        for proc in procs:
            proc.send_signal(signal.SIGINT)
        for proc in procs:
            proc.wait(timeout=30)
        for kind, files in sorted(self.files.items()):
            own: dict[str, int] = {}
            total = 0
            for path in files:
                if not path.exists():
                    continue
                for line in path.read_text().splitlines():
                    stack, _, count = line.rpartition(" ")
                    if not stack:
                        continue
                    frame = stack.rsplit(";", 1)[-1]
                    own[frame] = own.get(frame, 0) + int(count)
                    total += int(count)
            if not total:
                continue
            print(f"profile {kind}: {total} samples (GIL held)")
            for frame, n in sorted(own.items(), key=lambda kv: -kv[1])[:top]:
                print(f"  {100 * n / total:5.1f}%  {frame}")


def cpu_split(before: dict[str, float], after: dict[str, float], rows: int) -> str:
    """``kind=µs/row`` of CPU between two cpu_by_process() samples, largest first."""
    diff = {k: after[k] - before.get(k, 0.0) for k in after}
    parts = [f"{k}={v * 1e6 / max(rows, 1):.0f}" for k, v in
             sorted(diff.items(), key=lambda kv: -kv[1]) if v > 0.005]
    return "CPU us/row: " + " ".join(parts)
