"""`fix --diff` on a terminal shows the repository's control characters as escapes; piped or
redirected, it is the patch byte for byte, and it applies.

A context line of the patch is the repository's: a model card line holding an ESC colour
sequence, an OSC 8 hyperlink, a CR in the middle of the line (which makes the terminal print
the rest over what came before) and a bidi override was printed raw to the user's terminal.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import tty
from pathlib import Path

from conftest import ROOT
from hfdoctor.report import inert

SEED = ROOT / "fixtures" / "seed-incident"
LINE = "\x1b[8mhidden\x1b[0m \x1b]8;;http://evil.example\x1b\\docs\x1b]8;;\x1b\\ looks fine\rsafe \u202eevil\u202c\tend"
# Nothing of these may reach a terminal raw (a tab may: it moves the cursor to the next stop, nothing more).
RAW = set(map(chr, [*range(0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0), *inert.BIDI, *inert.SEPARATORS]))


def hostile_copy(tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    shutil.copytree(SEED, folder)
    card = (folder / "README.md").read_text()
    (folder / "README.md").write_text(card.replace("---\n\n# broken-model", f"---\n{LINE}\n\n# broken-model"))
    return folder


def on_a_terminal(*args: str) -> tuple[int, bytes, str]:
    """(exit code, what reached the terminal, stderr) of the command line with stdout a raw pty."""
    master, slave = os.openpty()
    tty.setraw(slave)  # no \n -> \r\n translation: the bytes as the program wrote them
    chunks: list[bytes] = []

    def read() -> None:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every writer has closed the terminal
                return
            if not chunk:
                return
            chunks.append(chunk)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    proc = subprocess.Popen([sys.executable, "-m", "hfdoctor", *args], stdout=slave, stderr=subprocess.PIPE,
                            env={**os.environ, "COLUMNS": "200"})
    os.close(slave)
    _, err = proc.communicate(timeout=240)
    reader.join(30)
    os.close(master)
    return proc.returncode, b"".join(chunks), err.decode("utf-8", "replace")


def test_a_diff_on_a_terminal_shows_control_characters_as_escapes(tmp_path):
    folder = hostile_copy(tmp_path)
    code, shown, err = on_a_terminal("fix", str(folder), "--diff")
    text = shown.decode("utf-8")
    assert code == 0 and "Traceback" not in err, err
    assert "\\x1b]8;;http://evil.example" in text and "<U+202E>evil" in text  # the line is there, as data
    for line in text.split("\n"):
        assert not RAW & set(line.removesuffix("\r")), (sorted(RAW & set(line)), line)
    assert "redirect it to a file for a patch that applies" in " ".join(err.split())
    assert LINE.encode() in (folder / "README.md").read_bytes()  # nothing written


def test_the_same_diff_redirected_is_byte_exact_and_applies(tmp_path):
    folder = hostile_copy(tmp_path)
    patch = subprocess.run([sys.executable, "-m", "hfdoctor", "fix", str(folder), "--diff"], capture_output=True,
                           timeout=240)
    assert patch.returncode == 0 and b"redirect it to a file" not in patch.stderr
    assert f"\n {LINE}\n".encode() in patch.stdout
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    applied = subprocess.run(["git", "apply", "-p1", "-"], input=patch.stdout, cwd=copy, capture_output=True)
    assert applied.returncode == 0, applied.stderr
    assert f"base_model: Qwen/Qwen3-8B\n---\n{LINE}\n".encode() in (copy / "README.md").read_bytes()


def test_a_crlf_line_end_is_kept_and_a_tab_too():
    from hfdoctor.report.diff import for_output

    diff = " a\tb\r\n+c\rd\r\n"
    assert for_output(diff, terminal=True) == " a\tb\r\n+c\\rd\r\n"
    assert for_output(diff, environ={}, terminal=False) == diff
