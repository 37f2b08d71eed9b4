"""Run the hfdoctor command line under a Python audit hook that records what it does.

    python tests/audit_run.py LOG -- check TARGET ...

Every event that writes, deletes, connects, or starts a program is appended to LOG as
one JSON line (`{"event": ..., "args": [...]}`), from this process and from the forked
workers it starts (they inherit the hook). Files opened for reading are recorded too,
with their path, so a test can tell that nothing outside the repository was read.
The log is written through a descriptor opened before the hook is installed, with
os.write, which raises no audit event of its own.
"""

from __future__ import annotations

import atexit
import json
import os
import sys

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
EVENTS = {
    "socket.connect", "socket.bind", "socket.getaddrinfo", "socket.sendto", "subprocess.Popen", "os.exec",
    "os.posix_spawn", "os.spawn", "os.system", "os.startfile", "os.mkdir", "os.rename", "os.remove", "os.rmdir",
    "os.symlink", "os.link", "os.truncate", "os.chmod", "os.chown", "os.utime", "shutil.copyfile", "shutil.rmtree",
    "shutil.move", "urllib.Request", "http.client.connect", "ctypes.dlopen",
}


def _plain(value):
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, bytes):
        return os.fsdecode(value)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value][:32]
    return repr(value)[:200]


_REPORTING = []  # set while the runner reads its own peak at exit: not the checked code's doing


def install(log_fd: int) -> None:
    def hook(event: str, args: tuple) -> None:
        if _REPORTING:
            return
        if event == "open":
            path, mode, flags = args
            writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & WRITE_FLAGS)
            if isinstance(path, int):
                return
            record = {"event": "open-write" if writes else "open-read", "args": [_plain(path)]}
        elif event in EVENTS:
            record = {"event": event, "args": _plain(args)}
        else:
            return
        record["pid"] = os.getpid()
        try:
            os.write(log_fd, (json.dumps(record, default=str) + "\n").encode("utf-8", "backslashreplace"))
        except OSError:
            pass

    sys.addaudithook(hook)


def record_peak(log_fd: int) -> None:
    """At exit, this process's peak resident memory (VmHWM: this program's own, from its exec on; a
    parent's wait4 rusage would count the pages of the process that forked it) as a `peak-rss` record."""
    _REPORTING.append(True)
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            kib = next((int(line.split()[1]) for line in status if line.startswith("VmHWM:")), None)
        if kib is not None:
            os.write(log_fd, (json.dumps({"event": "peak-rss", "args": [], "bytes": kib * 1024, "pid": os.getpid()}) + "\n").encode())
    except (OSError, ValueError):
        pass


def main() -> None:
    log, sep, *rest = sys.argv[1:]
    assert sep == "--"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    install(fd)
    atexit.register(record_peak, fd)
    sys.argv = ["hfdoctor", *rest]
    from hfdoctor.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
