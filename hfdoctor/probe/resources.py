"""What the probe cost in memory: peak GPU memory, and peak host memory with anonymous memory apart from
file-backed pages.

A process's peak RSS (VmHWM) counts the pages of memory-mapped safetensors that the kernel can drop at any time;
what the machine must really have free is the anonymous part (RssAnon). Linux keeps no peak of that, so it is
sampled from /proc/self/status every SAMPLE_SECONDS while the probe runs: a spike shorter than that can be
missed, which the report says.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

SAMPLE_SECONDS = 0.05
STATUS = Path("/proc/self/status")


def read_status() -> dict[str, int] | None:
    """RssAnon, RssFile, VmHWM... in bytes; None where /proc is not there (not Linux)."""
    try:
        text = STATUS.read_text()
    except OSError:
        return None
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        parts = value.split()
        if len(parts) == 2 and parts[1] == "kB" and parts[0].isdigit():
            out[key] = int(parts[0]) * 1024
    return out


class HostMemory:
    """A context that samples this process's resident memory while it is open."""

    def __init__(self, interval: float = SAMPLE_SECONDS):
        self.interval = interval
        self.peak_anon = 0
        self.peak_file = 0
        self.peak_rss: int | None = None
        self.available = read_status() is not None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hfdoctor-host-memory", daemon=True)

    def sample(self) -> None:
        """Take a reading now (besides the periodic ones): the probe takes one at each stage."""
        status = read_status()
        if status:
            self.peak_anon = max(self.peak_anon, status.get("RssAnon", 0))
            self.peak_file = max(self.peak_file, status.get("RssFile", 0))
            self.peak_rss = status.get("VmHWM", self.peak_rss)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> "HostMemory":
        if self.available:
            self.sample()
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.available:
            self._stop.set()
            self._thread.join()
            self.sample()

    def to_json(self) -> dict[str, Any]:
        if not self.available:
            return {"peak_host_anon_bytes": None, "peak_host_file_bytes": None, "peak_host_rss_bytes": None}
        return {"peak_host_anon_bytes": self.peak_anon, "peak_host_file_bytes": self.peak_file,
                "peak_host_rss_bytes": self.peak_rss}


def reset_gpu_peak() -> None:
    import torch

    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            torch.cuda.reset_peak_memory_stats(index)


def gpu_peak_bytes(device: str) -> int | None:
    """torch's peak allocated memory over every GPU since reset_gpu_peak; None when the model ran on the CPU."""
    import torch

    if not device.startswith("cuda") or not torch.cuda.is_available():
        return None
    return sum(int(torch.cuda.max_memory_allocated(index)) for index in range(torch.cuda.device_count()))
