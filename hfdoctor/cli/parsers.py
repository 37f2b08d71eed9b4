"""One argparse parser per command, read with parse_intermixed_args (options may come between targets)."""

from __future__ import annotations

import argparse
import inspect
from pathlib import Path
from typing import Callable

from hfdoctor.cli.commands import check, completion, explain, fix, hook_install, hook_uninstall, list_rules, probe
from hfdoctor.cli.common import CHECK_FORMATS, DEVICES, FORMATS, SEVERITIES, TARGETS_HELP, UPSTREAM_HELP

# --- parsers -------------------------------------------------------------------------------


def at_least(kind: type, low: float) -> Callable[[str], float]:
    def convert(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a{'n' if kind is int else ''} {kind.__name__}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{text} is below the minimum {kind(low)}")
        return value

    convert.__name__ = kind.__name__
    return convert


def new_parser(prog: str, command: Callable) -> argparse.ArgumentParser:
    doc = inspect.cleandoc(command.__doc__ or "")
    parser = argparse.ArgumentParser(prog=prog, description=doc, allow_abbrev=False,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.set_defaults(command=command)
    return parser


def choice(parser: argparse.ArgumentParser, flag: str, choices: tuple[str, ...], default: str, help: str,
           dest: str | None = None) -> None:
    parser.add_argument(flag, choices=choices, default=default, dest=dest, metavar=f"<{'|'.join(choices)}>",
                        help=f"{help} (default: {default})")


def output_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--show-info", action="store_true", help="Also show info findings (text; github: as "
                        "notices) and the report's other sections; json, jsonl and sarif always hold every finding.")
    parser.add_argument("--quiet", "-q", action="store_true", help="Text: only the summary line of each target.")
    parser.add_argument("--verbose", "-v", action="store_true", help="Text: whole messages, however long (by "
                        "default a line is cut at about 160 characters; `hfdoctor explain CODE` says more).")


def fail_on_option(parser: argparse.ArgumentParser, help: str) -> None:
    parser.add_argument("--fail-on", choices=SEVERITIES, default=None, metavar=f"<{'|'.join(SEVERITIES)}>",
                        help=f"{help} (default: the configuration's fail-on, else error)")


def config_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="Use this configuration file (a .hfdoctor.toml, or a "
                        "pyproject.toml's [tool.hfdoctor]) for every target; none is looked for.")
    parser.add_argument("--isolated", action="store_true", help="Read no configuration file.")


def rule_filters(parser: argparse.ArgumentParser, only: str, skip: str) -> None:
    parser.add_argument("--select", action="append", metavar="RULES", help=only)
    parser.add_argument("--ignore", action="append", metavar="RULES", help=skip)


def check_parser() -> argparse.ArgumentParser:
    p = new_parser("hfdoctor check", check)
    p.add_argument("targets", nargs="*", metavar="TARGET", help=TARGETS_HELP)
    p.add_argument("--from", dest="from_file", metavar="FILE", help="Read targets from FILE, one a line ('-': stdin).")
    choice(p, "--format", CHECK_FORMATS, "text", "text, json, jsonl (one report a line, as each target finishes), "
           "github (Actions annotations) or sarif.")
    rule_filters(p, "Only these rules: codes, names or prefixes (comma-separated).",
                 "Skip these rules: codes, names or prefixes.")
    fail_on_option(p, "Lowest severity that makes the exit code 1.")
    config_options(p)
    p.add_argument("--baseline", metavar="FILE", help="Leave out the findings this baseline accepts: fail only on "
                   "new ones.")
    p.add_argument("--write-baseline", metavar="FILE", help="Write every finding to FILE as the baseline (exit 0 "
                   "unless a target could not be checked).")
    p.add_argument("--upstream", action="append", metavar="DIR", help=UPSTREAM_HELP)
    p.add_argument("--revision", metavar="REV", help="The revision (branch, tag, commit) of Hub targets.")
    p.add_argument("--git-rev", metavar="REV", help="Check this commit of the git repository at each target "
                   "(what is pushed), not the working tree.")
    p.add_argument("--git-since", metavar="COMMIT", help="With --git-rev: the commit the remote has (all zeros: a "
                   "new branch, then every commit no remote has). Blob rules (large non-LFS blobs, pickle imports) "
                   "also judge every blob the commits in between add; the other rules judge --git-rev.")
    p.add_argument("--cache", action="store_true", help="Store what a Hub check downloads in the HF cache, for "
                   "offline checks later (check writes nothing otherwise).")
    p.add_argument("--timeout", type=at_least(float, 1.0), default=120.0, metavar="SECONDS",
                   help="Seconds a Hub repository may take, all requests together (default: 120).")
    p.add_argument("--jobs", "-j", type=at_least(int, 0), default=0, metavar="N",
                   help="Targets checked in parallel (default 0: the number of cores).")
    output_options(p)
    p.add_argument("--summary", type=Path, metavar="FILE", help="Also append a Markdown summary of warnings and "
                   "errors to this file (a CI job page: $GITHUB_STEP_SUMMARY). The only file check writes, and "
                   "only when asked.")
    return p


def fix_parser() -> argparse.ArgumentParser:
    p = new_parser("hfdoctor fix", fix)
    p.add_argument("targets", nargs="*", metavar="TARGET", help="Checkpoint directories to repair, or with --pr / "
                   "--diff Hub repo ids (ORG/NAME).")
    p.add_argument("--diff", action="store_true", help="Print a unified diff of the fixes and write nothing.")
    p.add_argument("--unsafe-fixes", action="store_true", help="Also apply fixes marked unsafe.")
    choice(p, "--format", FORMATS, "text", "Output format of the summary.")
    output_options(p)
    rule_filters(p, "Only fix findings of these rules.", "Do not fix findings of these rules.")
    fail_on_option(p, "Lowest severity left after fixing that makes the exit code 1.")
    config_options(p)
    p.add_argument("--upstream", action="append", metavar="DIR", help=UPSTREAM_HELP)
    p.add_argument("--pr", action="store_true", help="For Hub repo ids: open the patch as a pull request on the Hub "
                   "(needs HF_TOKEN); one per repository, never twice.")
    p.add_argument("--dry-run", action="store_true", help="With --pr: say what would be opened, open nothing.")
    p.add_argument("--from", dest="from_file", metavar="FILE", help="Read targets from FILE, one a line ('-': "
                   "stdin).")
    p.add_argument("--jobs", "-j", type=at_least(int, 1), default=1, metavar="N",
                   help="With --pr --from: repositories handled in parallel (default: 1).")
    return p


def probe_parser() -> argparse.ArgumentParser:
    p = new_parser("hfdoctor probe", probe)
    p.add_argument("target", nargs="?", metavar="TARGET", help="Checkpoint directory whose weights to load, or a "
                   ".gguf file (none with --endpoint: the endpoint alone).")
    choice(p, "--device", DEVICES, "auto", "Where to run the model.")
    p.add_argument("--max-new-tokens", type=at_least(int, 1), default=None, metavar="N",
                   help="Generation budget per reply (default: 1024 on a GPU; on a CPU what the weights' size "
                   "affords, 1024 for small models down to 96).")
    choice(p, "--format", FORMATS, "text", "Output format.")
    p.add_argument("--trust-remote-code", action="store_true",
                   help="Allow the repository's own Python code to run (off by default).")
    p.add_argument("--serve", action="store_true",
                   help="Also probe through `transformers serve` started on 127.0.0.1, and compare.")
    p.add_argument("--endpoint", metavar="URL", help="Also probe through this running OpenAI-compatible server "
                   "(vLLM, SGLang, TGI...), and compare.")
    p.add_argument("--endpoint-model", metavar="NAME", help="The model name to request from --endpoint (default: "
                   "its first listed model).")
    p.add_argument("--seeded", action="store_true", help="The server promises seeded determinism: seed-parity "
                   "differences fail instead of being inconclusive.")
    p.add_argument("--threads", type=at_least(int, 1), metavar="N", help="torch's CPU threads (default: the cores "
                   "available to this process).")
    p.add_argument("--verbose", action="store_true", help="Let transformers print its progress bars and warnings.")
    choice(p, "--dtype", ("auto", "float32", "bfloat16", "float16"), "auto", "What the model computes in (auto: "
           "the weights' own dtype; on a CPU, float32 for 16-bit weights where it fits).")
    p.add_argument("--no-cuda-graphs", action="store_true", help="Decode without CUDA graphs (slower; to compare "
                   "with what they give).")
    return p


def rules_parser() -> argparse.ArgumentParser:
    p = new_parser("hfdoctor rules", list_rules)
    choice(p, "--format", FORMATS, "text", "Output format.")
    p.add_argument("--markdown", action="store_true", help="A Markdown table (README's rule table).")
    return p


def explain_parser() -> argparse.ArgumentParser:
    p = new_parser("hfdoctor explain", explain)
    p.add_argument("rule", metavar="RULE", help="A rule code (TPL001) or name (missing-chat-template).")
    return p


def completion_parser() -> argparse.ArgumentParser:
    p = new_parser("hfdoctor completion", completion)
    # What to complete: every command's parser (read when the command runs, after this module is loaded);
    # hfdoctor.cli.parse adds the command groups (hook, webhook), which only it knows.
    p.set_defaults(command_line=lambda: (COMMANDS, SUMMARIES))
    p.add_argument("shell", choices=("bash", "zsh", "fish"), metavar="<bash|zsh|fish>",
                   help="The shell to complete in.")
    return p


def hook_install_parser() -> argparse.ArgumentParser:
    p = new_parser("hfdoctor hook install", hook_install)
    p.add_argument("--repo", type=Path, default=Path("."), metavar="DIR",
                   help="The git repository (default: the current directory).")
    p.add_argument("--force", action="store_true",
                   help="Accepted for compatibility: an existing pre-push hook is always kept and chained, never replaced.")
    fail_on_option(p, "Severity that blocks the push.")
    rule_filters(p, "Only these rules (stored in the hook).", "Skip these rules (stored in the hook).")
    p.add_argument("--config", metavar="FILE", help="The configuration file the hook uses (stored in the hook; by "
                   "default the repository's own, found as `check` finds it).")
    return p


def hook_uninstall_parser() -> argparse.ArgumentParser:
    p = new_parser("hfdoctor hook uninstall", hook_uninstall)
    p.add_argument("--repo", type=Path, default=Path("."), metavar="DIR",
                   help="The git repository (default: the current directory).")
    return p


# Command words -> the parser of that command; `hook` has commands of its own.
COMMANDS: dict[str, Callable[[], argparse.ArgumentParser]] = {
    "check": check_parser, "fix": fix_parser, "probe": probe_parser, "rules": rules_parser,
    "explain": explain_parser, "completion": completion_parser}
HOOK_COMMANDS: dict[str, Callable[[], argparse.ArgumentParser]] = {"install": hook_install_parser,
                                                                  "uninstall": hook_uninstall_parser}
SUMMARIES = {"check": check, "fix": fix, "probe": probe, "rules": list_rules, "explain": explain,
             "hook": "Git hooks that run hfdoctor (hook install, hook uninstall).", "completion": completion,
             "webhook": "The Hub webhook runner (webhook serve): checks every pull request and push."}


