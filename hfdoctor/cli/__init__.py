"""The command line: thin argparse commands over the library.

Exit codes (CONTRACT.md): 0 nothing at or above --fail-on; 1 findings at or above it
(fix: what is left; probe: a behaviour check failed); 2 usage error or a failure of
hfdoctor itself. Heavy libraries (torch, transformers) are never imported here.

Why argparse and not a CLI framework: `check` runs on every push, so its start-up is part of
what a user waits for. typer 0.29 builds a pydantic validator for every option of the
command it runs, which cost 0.2 s of CPU per invocation (a quarter of a check of
Qwen3-8B, bench/bench_check.py); argparse costs a few milliseconds. Each subcommand has its
own parser, read with parse_intermixed_args, so that options may come between targets
(`check A --format json B`), as they may with click.
"""

from __future__ import annotations

import argparse
import sys

from hfdoctor import __version__

from hfdoctor.cli.common import DESCRIPTION, CommandError, report_error
from hfdoctor.cli.parsers import COMMANDS, HOOK_COMMANDS, SUMMARIES
from hfdoctor.cli.webhook import WEBHOOK_COMMANDS

# Command words that only name commands: `hook install`, `webhook serve`.
GROUPS = {"hook": ("Git hooks that run hfdoctor.", HOOK_COMMANDS),
          "webhook": ("The Hub webhook runner: checks every pull request and push of the repositories a Hub "
                      "webhook watches.", WEBHOOK_COMMANDS)}

def group_parser(prog: str, description: str, commands: dict[str, object]) -> argparse.ArgumentParser:
    """The parser of a command word that only names commands: its help lists them."""
    lines = [f"  {name:<10} {(summary if isinstance(summary, str) else summary.__doc__ or '').strip().splitlines()[0]}"
             for name, summary in commands.items()]
    parser = argparse.ArgumentParser(prog=prog, description=description, allow_abbrev=False,
                                     usage=f"{prog} [-h] COMMAND [ARGS]...", epilog="commands:\n" + "\n".join(lines),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", metavar="COMMAND", choices=list(commands), help=argparse.SUPPRESS)
    return parser


def parse(argv: list[str]) -> argparse.Namespace:
    """argv -> the namespace of one command (its `command` the function to run); exits 0
    after help or the version, 2 on a usage error, as argparse does."""
    top = group_parser("hfdoctor", DESCRIPTION, SUMMARIES)
    top.add_argument("-V", "--version", action="version", version=f"hfdoctor {__version__}", help="Print the version.")
    if not argv:
        top.print_help(sys.stderr)
        raise SystemExit(2)
    word, rest = argv[0], argv[1:]
    if word in COMMANDS:
        args = COMMANDS[word]().parse_intermixed_args(rest)
        # `completion` completes the groups' commands too: this module is the one that knows them.
        args.groups = {group: commands for group, (_, commands) in GROUPS.items()}
        return args
    if word in GROUPS:
        description, commands = GROUPS[word]
        group = group_parser(f"hfdoctor {word}", description, {
            name: make().get_default("command") for name, make in commands.items()})
        if rest and rest[0] in commands:
            return commands[rest[0]]().parse_intermixed_args(rest[1:])
        if not rest:
            group.print_help(sys.stderr)
            raise SystemExit(2)
        group.parse_args(rest)  # help, or an error naming the commands there are
    top.parse_args(argv)  # --help, --version, or an error naming the commands there are
    raise SystemExit(2)


def exit_code_of(err: Exception) -> int | None:
    """The one map from the errors a command may end with to its exit code (CONTRACT: 2, the job
    could not be done); None: not an error a command ends with, a bug of hfdoctor."""
    from hfdoctor.cli.hook import HookError
    from hfdoctor.config import ConfigError
    from hfdoctor.sources.base import SourceError

    if isinstance(err, (CommandError, ConfigError, HookError, SourceError)):
        return 2
    return None


def run(argv: list[str]) -> int:
    """Parse ARGV and run its command: the exit code (tests call this in-process)."""
    try:
        args = parse(argv)
        return int(args.command(args) or 0)
    except SystemExit as stop:  # help, a usage error of argparse
        return stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 2)
    except Exception as err:
        code = exit_code_of(err)
        if code is None:
            raise
        report_error(str(err))
        return code


def main() -> None:
    # Repository data reaches the output (file names with undecodable bytes, JSON strings with
    # lone surrogates): whatever it holds, what hfdoctor prints is valid UTF-8, the odd
    # characters escaped (\udcff), never a UnicodeEncodeError.
    for stream_ in (sys.stdout, sys.stderr):
        if hasattr(stream_, "reconfigure"):
            stream_.reconfigure(errors="backslashreplace")
    try:
        code = run(sys.argv[1:])
    except KeyboardInterrupt:
        code = 130
    sys.stdout.flush()
    sys.exit(code)


if __name__ == "__main__":
    main()
