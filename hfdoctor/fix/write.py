"""Writing a plan: atomic, in place, never outside the repository, never a weight file.

Every changed file goes to a temporary file in its own directory, is fsynced, then
renamed over the old one (os.replace) and the directory fsynced. A failure part-way
puts back the files already replaced. Writes never go through a symlink that leaves
the repository, and never touch a weight file. A file keeps its mode and owner.

A run killed outright (SIGKILL, power loss) leaves each file old or new, and may leave a
temporary `.NAME.*.hfdoctor.tmp` beside a file it had not yet replaced; the next run, which
plans from what is on disk, writes that file and removes the stale temporary files beside it.
"""

from __future__ import annotations

import os
import stat
import tempfile
from contextlib import suppress
from pathlib import Path, PurePosixPath

from hfdoctor.repo import WEIGHT_SUFFIXES

TMP_SUFFIX = ".hfdoctor.tmp"  # of the temporary file beside each file written: .NAME.<random>.hfdoctor.tmp


class UnsafeWrite(Exception):
    """A write hfdoctor refuses to make (outside the repo, through a symlink, a weight file)."""


def writable_path(root: Path, rel: str) -> Path:
    """The real path to write `rel` to; raises UnsafeWrite when it must not be written."""
    parts = PurePosixPath(rel)
    if parts.is_absolute() or ".." in parts.parts or not parts.parts:
        raise UnsafeWrite(f"{rel} is not a path inside the repository")
    if rel.endswith(WEIGHT_SUFFIXES):
        raise UnsafeWrite(f"{rel} is a weight file; hfdoctor never edits weights")
    real_root = root.resolve()
    real = (root / rel).resolve()
    if not real.is_relative_to(real_root):
        raise UnsafeWrite(f"{rel} resolves to {real}, outside the repository (a symlink); not written")
    if real.is_dir():
        raise UnsafeWrite(f"{rel} is a directory")
    return real


def write_changes(root: Path, changed: dict[str, bytes], original: dict[str, bytes | None]) -> None:
    """Write every file of `changed` (rel -> new bytes) under `root` atomically; on failure,
    put back those already written. `original` holds what each file held when the change
    was planned (None: new); a file that changed on disk since then stops everything.

    Each file is at every moment either its old or its new content, never partial. A
    crash between two renames can leave some files new and others old; a temporary
    `.NAME.*.hfdoctor.tmp` may then remain beside them.
    """
    targets = {rel: writable_path(root, rel) for rel in sorted(changed)}
    for rel, real in targets.items():
        now = real.read_bytes() if real.exists() else None
        if now != original[rel]:
            raise OSError(f"{rel} changed on disk while hfdoctor was fixing; nothing written")
    for real in targets.values():
        _remove_stale_temporaries(real)
    staged: dict[str, str] = {}
    replaced: list[str] = []
    try:
        for rel, real in targets.items():
            try:
                staged[rel] = _stage(real, changed[rel])
            except OSError as err:  # name the file, not the temporary one beside it
                raise OSError(f"cannot write {rel}: {err.strerror or err}") from err
        for rel, real in targets.items():
            os.replace(staged[rel], real)
            del staged[rel]
            replaced.append(rel)
            _fsync_dir(real.parent)
    except BaseException:
        for rel in reversed(replaced):
            _restore(targets[rel], original[rel])
        raise
    finally:
        for tmp in staged.values():
            with suppress(OSError):
                os.unlink(tmp)


def _remove_stale_temporaries(real: Path) -> None:
    """Remove the temporary files an interrupted run left beside `real` (`.NAME.*.hfdoctor.tmp`,
    as _stage names them; regular files only)."""
    prefix, suffix = f".{real.name}.", TMP_SUFFIX
    try:
        entries = list(os.scandir(real.parent))
    except OSError:
        return
    for entry in entries:
        if entry.name.startswith(prefix) and entry.name.endswith(suffix) and entry.is_file(follow_symlinks=False):
            with suppress(OSError):
                os.unlink(entry.path)


def _stage(real: Path, data: bytes) -> str:
    """Write `data` to a synced temporary file beside `real`, with `real`'s mode and owner."""
    old = real.stat() if real.exists() else None
    fd, tmp = tempfile.mkstemp(prefix=f".{real.name}.", suffix=TMP_SUFFIX, dir=real.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, stat.S_IMODE(old.st_mode) if old else _new_file_mode())
        if old is not None and hasattr(os, "chown"):
            with suppress(OSError):  # only root may give a file away; others keep their own
                os.chown(tmp, old.st_uid, old.st_gid)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise
    return tmp


def _restore(real: Path, data: bytes | None) -> None:
    with suppress(OSError):
        if data is None:
            real.unlink()
        else:
            os.replace(_stage(real, data), real)
        _fsync_dir(real.parent)


def _new_file_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _fsync_dir(directory: Path) -> None:
    """Make a rename durable. Not every platform can open a directory (Windows)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
