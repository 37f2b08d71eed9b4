"""What every command shares: the consoles, the one way to fail (exit 2), target and selector reading."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import NoReturn, Optional


DESCRIPTION = ("Lint and repair Hugging Face model repositories: chat templates, tokenizers, "
               "generation config, model card, weights.")
CHECK_FORMATS = ("text", "json", "jsonl", "github", "sarif")
FORMATS = ("text", "json")
SEVERITIES = ("error", "warning", "info")
DEVICES = ("auto", "cpu", "cuda")
UPSTREAM_HELP = ("Directory of upstream model folders named <org>--<name>/ (repeatable; also HFDOCTOR_UPSTREAM), "
                 "consulted before the local Hugging Face cache and the Hub.")
TARGETS_HELP = ("Checkpoint directories, Hub repo ids (ORG/NAME, ORG/NAME@REVISION), or with --git-rev the "
                "directory of a git repository.")


def stdout_console():
    """Lines wrap to the width of a terminal; a pipe or a file (CI logs, even with FORCE_COLOR)
    gets each line whole, as grep and GitHub's runner read them."""
    from rich.console import Console

    return Console(highlight=False, soft_wrap=not sys.stdout.isatty())


def stderr_console():
    """As stdout: a CI log gets each line whole (GitHub's runner reads stderr's lines too, and a
    wrapped name could put `::error::` at the start of one)."""
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=not sys.stderr.isatty())


class CommandError(Exception):
    """A usage error, or a job hfdoctor could not do: its message goes to stderr, exit 2."""


def fail(message: str) -> NoReturn:
    """End the command with `message` on stderr and exit 2 (cli.run prints it)."""
    raise CommandError(message)


def report_error(message: str) -> None:
    """`error: message` on stderr, the message shown inert (names from outside)."""
    from hfdoctor.report.text import line

    stderr_console().print(line(("error:", "bold red"), " ", message))


def split_list(values: Optional[list[str]]) -> list[str]:
    """--select A,B --select C -> [A, B, C]."""
    out: list[str] = []
    for value in values or []:
        out.extend(v.strip() for v in value.split(",") if v.strip())
    return out


def check_selectors(selectors: list[str]) -> None:
    from hfdoctor.lint.rules import ALL_RULES, matches

    for selector in selectors:
        if selector.upper() != "ALL" and not any(matches(r, selector) for r in ALL_RULES):
            fail(f"no rule matches {selector!r} (see `hfdoctor rules`)")


def command_options(args, **extra):
    """The Options of a command that checks: its --select/--ignore (checked), --upstream, --fail-on,
    and --config (read and checked now: a bad file is exit 2 before anything runs) or --isolated."""
    from hfdoctor.config import ConfigError, Options, load_file
    from hfdoctor.lint.configured import validate

    selects, ignores = split_list(args.select), split_list(args.ignore)
    check_selectors(selects + ignores)
    settings = None
    if args.config is not None:
        if args.isolated:
            fail("--config and --isolated: give one")
        try:
            settings = load_file(args.config)
            validate(settings)
        except ConfigError as err:
            fail(f"--config {err}")
    return Options(tuple(selects), tuple(ignores), tuple(args.upstream or ()), fail_on=args.fail_on,
                   settings=settings, isolated=args.isolated, **extra)


def local_directory(target: str, command: str) -> str:
    """fix and probe work on a directory on this disk (they write files, or load weights)."""
    if os.path.isdir(target):
        return target
    from hfdoctor.sources.targets import REPO_ID, looks_like_path

    if REPO_ID.match(target) and not looks_like_path(target) and not os.path.exists(target):
        hint = f"`hfdoctor fix {target} --pr` opens the patch as a Hub pull request, " if command == "fix" else ""
        fail(f"{command} works on a local directory; {hint}download {target} first "
             f"(`hf download {target} --local-dir DIR`), or run `hfdoctor check {target}`")
    fail(f"{target}: no such directory")


def read_targets(from_file: Optional[str]) -> list[str]:
    """--from FILE: one target a line; blank lines and # comments skipped."""
    if from_file is None:
        return []
    try:
        text = sys.stdin.read() if from_file == "-" else Path(from_file).read_text(encoding="utf-8")
    except OSError as err:
        fail(f"cannot read --from {from_file}: {err.strerror or err}")
    lines = (line.strip() for line in text.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


