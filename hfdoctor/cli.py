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
import inspect
import json
import os
import sys
from pathlib import Path
from typing import Callable, NoReturn, Optional

from hfdoctor import __version__
from hfdoctor.findings import Severity

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
    from rich.console import Console

    return Console(stderr=True, highlight=False)


def fail(message: str) -> NoReturn:
    """A usage error or a failure of hfdoctor itself: message on stderr, exit 2."""
    from hfdoctor.report.text import line

    stderr_console().print(line(("error:", "bold red"), " ", message))  # names from outside, shown inert
    raise SystemExit(2)


def split_list(values: Optional[list[str]]) -> list[str]:
    """--select A,B --select C -> [A, B, C]."""
    out: list[str] = []
    for value in values or []:
        out.extend(v.strip() for v in value.split(",") if v.strip())
    return out


def check_selectors(selectors: list[str]) -> None:
    from hfdoctor.rules import ALL_RULES, matches

    for selector in selectors:
        if selector.upper() != "ALL" and not any(matches(r, selector) for r in ALL_RULES):
            fail(f"no rule matches {selector!r} (see `hfdoctor rules`)")


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


# --- check -------------------------------------------------------------------------------


def check(args: argparse.Namespace) -> int:
    """Run every static rule. Never writes (but --summary); never reads tensor data."""
    from hfdoctor.survey import Options, check_many, rule_counts

    selects, ignores = split_list(args.select), split_list(args.ignore)
    check_selectors(selects + ignores)
    all_targets = list(args.targets) + read_targets(args.from_file)
    if not all_targets:
        fail("give at least one TARGET (or --from FILE)")
    if args.git_since is not None and args.git_rev is None:
        fail("--git-since needs --git-rev (the commit being pushed)")
    options = Options(tuple(selects), tuple(ignores), tuple(args.upstream or ()), args.revision, args.git_rev,
                      args.cache, args.timeout, git_since=args.git_since)
    workers = args.jobs or os.cpu_count() or 1
    display = text_display(args)
    results: list = [None] * len(all_targets)
    for index, result in check_many(all_targets, options, workers):
        results[index] = result
        stream(result, args.format, display)
    emit(results, args.format, display)
    if args.summary is not None:
        from hfdoctor.report.markdown import write_markdown

        try:
            with open(args.summary, "a", encoding="utf-8") as handle:
                handle.write(write_markdown(results))
        except OSError as err:
            fail(f"cannot write --summary {args.summary}: {err.strerror or err}")
    if len(all_targets) > 1 and args.format in ("text", "jsonl"):
        from hfdoctor.findings import TargetError
        from hfdoctor.report.text import write_rule_summary

        console = stdout_console() if args.format == "text" else stderr_console()
        failed = sum(isinstance(r, TargetError) for r in results)
        write_rule_summary(rule_counts(results), len(results), failed, console, display)
    return exit_code(results, Severity.parse(args.fail_on))


def text_display(args: argparse.Namespace):
    from hfdoctor.report.text import Display

    return Display(show_info=args.show_info, quiet=getattr(args, "quiet", False))


def stream(result, output_format: str, display) -> None:
    """Formats that print each target as it finishes."""
    if output_format == "jsonl":
        from hfdoctor.report.json_report import write_jsonl_line

        print(write_jsonl_line(result), flush=True)
    elif output_format == "text":
        from hfdoctor.report.text import write_text

        write_text([result], stdout_console(), display)


def emit(results, output_format: str, display) -> None:
    """Formats that print once, when every target is done."""
    if output_format == "json":
        from hfdoctor.report.json_report import write_json

        print(write_json(results))
    elif output_format == "github":
        from hfdoctor.report.github import write_github

        print(write_github(results, show_info=display.show_info))
    elif output_format == "sarif":
        from hfdoctor.report.sarif import write_sarif

        print(write_sarif(results))


def exit_code(results, fail_on: Severity) -> int:
    from hfdoctor.findings import TargetError

    if any(isinstance(r, TargetError) or r.internal_errors for r in results):
        return 2
    worst = max((r.worst() for r in results if r.worst() is not None), default=None)
    return 1 if worst is not None and worst >= fail_on else 0


# --- fix, probe ----------------------------------------------------------------------------


def fix(args: argparse.Namespace) -> int:
    """Write the minimal patch for fixable findings, then re-check and report what remains."""
    from hfdoctor.upstream import Upstream

    selects, ignores = split_list(args.select), split_list(args.ignore)
    check_selectors(selects + ignores)
    up = Upstream.from_options(args.upstream)
    targets = ([args.target] if args.target else []) + read_targets(args.from_file)
    if not targets:
        fail("give a TARGET (or --pr --from FILE)")
    hub = [t for t in targets if not os.path.isdir(t)]
    fail_on = Severity.parse(args.fail_on)
    if args.pr or (args.diff and hub):
        from hfdoctor.fix.cli_hub import run_hub_fix

        return run_hub_fix(targets, pr=args.pr, diff=args.diff, dry_run=args.dry_run, unsafe_fixes=args.unsafe_fixes,
                           select=selects, ignore=ignores, upstream=up, jobs=args.jobs,
                           output_format=args.format, fail_on=fail_on, console=stdout_console())
    if len(targets) != 1 or args.dry_run:
        fail("--from, --jobs and --dry-run are for `fix --pr`; fix one directory at a time")
    from hfdoctor.fix import run_fix

    return run_fix(local_directory(targets[0], "fix"), diff=args.diff, unsafe_fixes=args.unsafe_fixes,
                   select=selects, ignore=ignores, upstream=up, fail_on=fail_on, output_format=args.format,
                   console=stdout_console(), display=text_display(args))


def probe(args: argparse.Namespace) -> int:
    """Load the weights and test behaviour: thinking on/off, stopping at eos, determinism."""
    from hfdoctor.probe import run_probe

    served = dict(endpoint=args.endpoint, endpoint_model=args.endpoint_model, seeded=args.seeded)
    if args.target is None:
        if args.endpoint is None:
            fail("give a TARGET (a checkpoint directory), or --endpoint URL to probe a running server alone")
        return run_probe(None, output_format=args.format, console=stdout_console(), display_target=args.endpoint,
                         **served)
    gguf_file = None
    if os.path.isfile(args.target) and args.target.endswith(".gguf"):  # one GGUF: its folder is the repository
        path, gguf_file = os.path.dirname(os.path.abspath(args.target)), os.path.basename(args.target)
    else:
        path = local_directory(args.target, "probe")
    return run_probe(path, device=args.device, max_new_tokens=args.max_new_tokens, output_format=args.format,
                     trust_remote_code=args.trust_remote_code, console=stdout_console(), display_target=args.target,
                     gguf_file=gguf_file, serve=args.serve, **served)


# --- rules, explain, hook install -------------------------------------------------------


def list_rules(args: argparse.Namespace) -> int:
    """List every rule: code, name, default severity and what it flags."""
    from hfdoctor.rules import ALL_RULES

    if args.markdown:
        print("| code | name | severity | what it flags |\n|---|---|---|---|")
        for r in ALL_RULES:
            # The anchor is each rule's helpUri in SARIF (hfdoctor.report.sarif.rule_help_uri).
            print(f'| <a id="{r.code.lower()}"></a>{r.code} | `{r.name}` | {r.severity} | '
                  f"{r.summary.replace('|', chr(92) + '|')} |")
    elif args.format == "json":
        print(json.dumps([{"code": r.code, "rule": r.name, "severity": str(r.severity), "summary": r.summary}
                          for r in ALL_RULES], indent=2))
    else:
        console = stdout_console()
        for r in ALL_RULES:
            console.print(f"[bold]{r.code:<8}[/bold] {r.name:<30} {str(r.severity):<8} {r.summary}", soft_wrap=True)
    return 0


def explain(args: argparse.Namespace) -> int:
    """Print a rule's documentation."""
    from hfdoctor.rules import find_rule

    found = find_rule(args.rule)
    if found is None:
        fail(f"unknown rule {args.rule!r} (see `hfdoctor rules`)")
    print(f"{found.code} {found.name} (default severity: {found.severity})\n")
    print(found.doc)
    return 0


def hook_install(args: argparse.Namespace) -> int:
    """Install a git pre-push hook that runs `hfdoctor check` on what each push carries.

    For each pushed ref, every rule judges the pushed commit (--git-rev: the tip, what gets
    served), and the blob rules (lfs-attributes: plain blobs over 10 MiB; unsafe-pickle:
    pickles that import code) also judge every blob that the pushed commits add
    (remote..local; every commit no remote has for a new branch), each blob once. The
    working tree is never read. A pre-push hook that was already there (git-lfs's, which
    uploads the LFS objects; pre-commit's) is kept and runs after hfdoctor's check passes,
    so a blocked push uploads nothing. Bypass once with `git push --no-verify`."""
    from hfdoctor.hook import HookError, install_pre_push, lfs_advice
    from hfdoctor.report.text import say

    try:
        path, chained = install_pre_push(args.repo, fail_on=args.fail_on)
    except HookError as err:
        fail(str(err))
    say(stdout_console(), f"installed {path}")  # a checkout's path, a kept hook's name: shown inert
    say(stdout_console(), lfs_advice(args.repo, chained))
    return 0


def hook_uninstall(args: argparse.Namespace) -> int:
    """Remove hfdoctor's pre-push hook and restore the hook it kept (git-lfs's, pre-commit's)."""
    from hfdoctor.hook import HookError, uninstall_pre_push
    from hfdoctor.report.text import say

    try:
        path, restored = uninstall_pre_push(args.repo)
    except HookError as err:
        fail(str(err))
    say(stdout_console(), f"restored {path} (the hook that was there before hfdoctor's)" if restored
        else f"removed {path}")
    return 0


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


def output_options(parser: argparse.ArgumentParser, quiet: bool) -> None:
    parser.add_argument("--show-info", action="store_true", help="Also show info findings (text; github: as "
                        "notices) and the report's other sections; json, jsonl and sarif always hold every finding.")
    if quiet:
        parser.add_argument("--quiet", "-q", action="store_true", help="Text: only the summary line of each target.")


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
    choice(p, "--fail-on", SEVERITIES, "error", "Lowest severity that makes the exit code 1.")
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
    output_options(p, quiet=True)
    p.add_argument("--summary", type=Path, metavar="FILE", help="Also append a Markdown summary of warnings and "
                   "errors to this file (a CI job page: $GITHUB_STEP_SUMMARY). The only file check writes, and "
                   "only when asked.")
    return p


def fix_parser() -> argparse.ArgumentParser:
    p = new_parser("hfdoctor fix", fix)
    p.add_argument("target", nargs="?", metavar="TARGET", help="Checkpoint directory to repair, or with --pr / "
                   "--diff a Hub repo id (ORG/NAME).")
    p.add_argument("--diff", action="store_true", help="Print a unified diff of the fixes and write nothing.")
    p.add_argument("--unsafe-fixes", action="store_true", help="Also apply fixes marked unsafe.")
    choice(p, "--format", FORMATS, "text", "Output format of the summary.")
    output_options(p, quiet=False)
    rule_filters(p, "Only fix findings of these rules.", "Do not fix findings of these rules.")
    choice(p, "--fail-on", SEVERITIES, "error", "Lowest severity left after fixing that makes the exit code 1.")
    p.add_argument("--upstream", action="append", metavar="DIR", help=UPSTREAM_HELP)
    p.add_argument("--pr", action="store_true", help="For Hub repo ids: open the patch as a pull request on the Hub "
                   "(needs HF_TOKEN); one per repository, never twice.")
    p.add_argument("--dry-run", action="store_true", help="With --pr: say what would be opened, open nothing.")
    p.add_argument("--from", dest="from_file", metavar="FILE", help="With --pr: read Hub repo ids from FILE, one a "
                   "line ('-': stdin).")
    p.add_argument("--jobs", "-j", type=at_least(int, 1), default=1, metavar="N",
                   help="With --pr --from: repositories handled in parallel (default: 1).")
    return p


def probe_parser() -> argparse.ArgumentParser:
    p = new_parser("hfdoctor probe", probe)
    p.add_argument("target", nargs="?", metavar="TARGET", help="Checkpoint directory whose weights to load, or a "
                   ".gguf file (none with --endpoint: the endpoint alone).")
    choice(p, "--device", DEVICES, "auto", "Where to run the model.")
    p.add_argument("--max-new-tokens", type=at_least(int, 1), default=96, metavar="N",
                   help="Generation budget per check (default: 96).")
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


def hook_install_parser() -> argparse.ArgumentParser:
    p = new_parser("hfdoctor hook install", hook_install)
    p.add_argument("--repo", type=Path, default=Path("."), metavar="DIR",
                   help="The git repository (default: the current directory).")
    p.add_argument("--force", action="store_true",
                   help="Accepted for compatibility: an existing pre-push hook is always kept and chained, never replaced.")
    choice(p, "--fail-on", SEVERITIES, "error", "Severity that blocks the push.")
    return p


def hook_uninstall_parser() -> argparse.ArgumentParser:
    p = new_parser("hfdoctor hook uninstall", hook_uninstall)
    p.add_argument("--repo", type=Path, default=Path("."), metavar="DIR",
                   help="The git repository (default: the current directory).")
    return p


# Command words -> the parser of that command; `hook` has commands of its own.
COMMANDS: dict[str, Callable[[], argparse.ArgumentParser]] = {
    "check": check_parser, "fix": fix_parser, "probe": probe_parser, "rules": rules_parser,
    "explain": explain_parser}
HOOK_COMMANDS: dict[str, Callable[[], argparse.ArgumentParser]] = {"install": hook_install_parser,
                                                                  "uninstall": hook_uninstall_parser}
SUMMARIES = {"check": check, "fix": fix, "probe": probe, "rules": list_rules, "explain": explain,
             "hook": "Git hooks that run hfdoctor (hook install, hook uninstall)."}


def group_parser(prog: str, description: str, commands: dict[str, object]) -> argparse.ArgumentParser:
    """The parser of a command word that only names commands: its help lists them."""
    lines = [f"  {name:<9} {(summary if isinstance(summary, str) else summary.__doc__ or '').strip().splitlines()[0]}"
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
    top.add_argument("--version", action="version", version=f"hfdoctor {__version__}", help="Print the version.")
    if not argv:
        top.print_help(sys.stderr)
        raise SystemExit(2)
    word, rest = argv[0], argv[1:]
    if word in COMMANDS:
        return COMMANDS[word]().parse_intermixed_args(rest)
    if word == "hook":
        hook = group_parser("hfdoctor hook", "Git hooks that run hfdoctor.", {
            name: make().get_default("command") for name, make in HOOK_COMMANDS.items()})
        if rest and rest[0] in HOOK_COMMANDS:
            return HOOK_COMMANDS[rest[0]]().parse_intermixed_args(rest[1:])
        if not rest:
            hook.print_help(sys.stderr)
            raise SystemExit(2)
        hook.parse_args(rest)  # help, or an error naming the commands there are
    top.parse_args(argv)  # --help, --version, or an error naming the commands there are
    raise SystemExit(2)


def run(argv: list[str]) -> int:
    """Parse ARGV and run its command: the exit code (tests call this in-process)."""
    try:
        args = parse(argv)
        return int(args.command(args) or 0)
    except SystemExit as stop:  # help, a usage error, fail()
        return stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 2)


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
