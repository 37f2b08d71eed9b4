"""The command line: thin typer commands over the library.

Exit codes (CONTRACT.md): 0 nothing at or above --fail-on; 1 findings at or above it
(fix: what is left; probe: a behaviour check failed); 2 usage error or a failure of
hfdoctor itself. Heavy libraries (torch, transformers) are never imported here.
"""

from __future__ import annotations

import json
import os
import sys
from enum import Enum
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console

from hfdoctor import __version__
from hfdoctor.findings import Severity

def _flags_without_type(option_class) -> None:
    """Typer 0.29 prints a type after every option, flags included (`--diff <bool>`), which
    reads as if the flag took a value. Flags show none, as click and argparse print them."""
    shown = getattr(option_class, "display_type_rich", None)
    if shown is None or getattr(shown, "_hfdoctor", False):
        return

    def display_type_rich(self, ctx):
        return None if getattr(self, "is_flag", False) and self.metavar is None else shown(self, ctx)

    display_type_rich._hfdoctor = True  # type: ignore[attr-defined]
    option_class.display_type_rich = display_type_rich


try:
    from typer.core import TyperOption

    _flags_without_type(TyperOption)
except ImportError:  # an older typer: it never printed one
    pass

app = typer.Typer(
    name="hfdoctor",
    help="Lint and repair Hugging Face model repositories: chat templates, tokenizers, "
    "generation config, model card, weights.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
hook_app = typer.Typer(help="Git hooks that run hfdoctor.", no_args_is_help=True)
app.add_typer(hook_app, name="hook")


class OutputFormat(str, Enum):
    text = "text"
    json = "json"


class CheckFormat(str, Enum):
    """check also speaks the formats CI systems read, and one report a line for catalogs."""

    text = "text"
    json = "json"
    jsonl = "jsonl"
    github = "github"
    sarif = "sarif"


class FailOn(str, Enum):
    error = "error"
    warning = "warning"
    info = "info"


class Device(str, Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


def stdout_console() -> Console:
    return Console(highlight=False, soft_wrap=True)


def fail(message: str) -> None:
    """A usage error or a failure of hfdoctor itself: message on stderr, exit 2."""
    Console(stderr=True, highlight=False).print(f"[bold red]error:[/bold red] {message}")
    raise typer.Exit(2)


def split_list(values: Optional[List[str]]) -> list[str]:
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
    raise AssertionError  # fail() exits


def version_callback(value: bool) -> None:
    if value:
        print(f"hfdoctor {__version__}")
        raise typer.Exit(0)


@app.callback()
def main_callback(
    version: bool = typer.Option(False, "--version", callback=version_callback, is_eager=True, help="Print the version."),
) -> None:
    """hfdoctor: find what breaks serving and training in a model repository, and fix it."""


UPSTREAM_HELP = ("Directory of upstream model folders named <org>--<name>/ (repeatable; also HFDOCTOR_UPSTREAM), "
                 "consulted before the local Hugging Face cache and the Hub.")


TARGETS_HELP = ("Checkpoint directories, Hub repo ids (ORG/NAME, ORG/NAME@REVISION), or with --git-rev the "
                "directory of a git repository.")


@app.command()
def check(
    targets: Optional[List[str]] = typer.Argument(None, help=TARGETS_HELP),
    from_file: Optional[str] = typer.Option(None, "--from", help="Read targets from FILE, one a line ('-': stdin)."),
    output_format: CheckFormat = typer.Option(
        CheckFormat.text, "--format",
        help="text, json, jsonl (one report a line, as each target finishes), github (Actions annotations) or sarif.",
    ),
    select: Optional[List[str]] = typer.Option(None, "--select", help="Only these rules: codes, names or prefixes (comma-separated)."),
    ignore: Optional[List[str]] = typer.Option(None, "--ignore", help="Skip these rules: codes, names or prefixes."),
    fail_on: FailOn = typer.Option(FailOn.error, "--fail-on", help="Lowest severity that makes the exit code 1."),
    upstream: Optional[List[str]] = typer.Option(None, "--upstream", help=UPSTREAM_HELP),
    revision: Optional[str] = typer.Option(None, "--revision", help="The revision (branch, tag, commit) of Hub targets."),
    git_rev: Optional[str] = typer.Option(None, "--git-rev", help="Check this commit of the git repository at each target (what is pushed), not the working tree."),
    git_since: Optional[str] = typer.Option(None, "--git-since", help="With --git-rev: the commit the remote has (all zeros: a new branch, then every commit no remote has). Blob rules (large non-LFS blobs, pickle imports) also judge every blob the commits in between add; the other rules judge --git-rev."),
    cache: bool = typer.Option(False, "--cache", help="Store what a Hub check downloads in the HF cache, for offline checks later (check writes nothing otherwise)."),
    timeout: float = typer.Option(120.0, "--timeout", min=1.0, help="Seconds a Hub repository may take, all requests together."),
    jobs: int = typer.Option(0, "--jobs", "-j", min=0, help="Targets checked in parallel (0: the number of cores)."),
    summary: Optional[Path] = typer.Option(None, "--summary", help="Also append a Markdown summary of warnings and errors to this file (a CI job page: $GITHUB_STEP_SUMMARY). The only file check writes, and only when asked."),
) -> None:
    """Run every static rule. Never writes (but --summary); never reads tensor data."""
    from hfdoctor.survey import Options, check_many, rule_counts

    selects, ignores = split_list(select), split_list(ignore)
    check_selectors(selects + ignores)
    all_targets = list(targets or []) + read_targets(from_file)
    if not all_targets:
        fail("give at least one TARGET (or --from FILE)")
    if git_since is not None and git_rev is None:
        fail("--git-since needs --git-rev (the commit being pushed)")
    options = Options(tuple(selects), tuple(ignores), tuple(upstream or ()), revision, git_rev, cache, timeout,
                      git_since=git_since)
    workers = jobs or os.cpu_count() or 1
    results: list = [None] * len(all_targets)
    for index, result in check_many(all_targets, options, workers):
        results[index] = result
        stream(result, output_format)
    emit(results, output_format)
    if summary is not None:
        from hfdoctor.report.markdown import write_markdown

        try:
            with open(summary, "a", encoding="utf-8") as handle:
                handle.write(write_markdown(results))
        except OSError as err:
            fail(f"cannot write --summary {summary}: {err.strerror or err}")
    if len(all_targets) > 1 and output_format in (CheckFormat.text, CheckFormat.jsonl):
        from hfdoctor.findings import TargetError
        from hfdoctor.report.text import write_rule_summary

        console = stdout_console() if output_format is CheckFormat.text else Console(stderr=True, highlight=False)
        write_rule_summary(rule_counts(results), len(results), sum(isinstance(r, TargetError) for r in results), console)
    raise typer.Exit(exit_code(results, Severity.parse(fail_on.value)))


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


def stream(result, output_format: CheckFormat) -> None:
    """Formats that print each target as it finishes."""
    if output_format is CheckFormat.jsonl:
        from hfdoctor.report.json_report import write_jsonl_line

        print(write_jsonl_line(result), flush=True)
    elif output_format is CheckFormat.text:
        from hfdoctor.report.text import write_text

        write_text([result], stdout_console())


def emit(results, output_format: CheckFormat) -> None:
    """Formats that print once, when every target is done."""
    if output_format is CheckFormat.json:
        from hfdoctor.report.json_report import write_json

        print(write_json(results))
    elif output_format is CheckFormat.github:
        from hfdoctor.report.github import write_github

        print(write_github(results))
    elif output_format is CheckFormat.sarif:
        from hfdoctor.report.sarif import write_sarif

        print(write_sarif(results))


def exit_code(results, fail_on: Severity) -> int:
    from hfdoctor.findings import TargetError

    if any(isinstance(r, TargetError) or r.internal_errors for r in results):
        return 2
    worst = max((r.worst() for r in results if r.worst() is not None), default=None)
    return 1 if worst is not None and worst >= fail_on else 0


@app.command()
def fix(
    target: Optional[str] = typer.Argument(None, help="Checkpoint directory to repair, or with --pr / --diff a Hub repo id (ORG/NAME)."),
    diff: bool = typer.Option(False, "--diff", help="Print a unified diff of the fixes and write nothing."),
    unsafe_fixes: bool = typer.Option(False, "--unsafe-fixes", help="Also apply fixes marked unsafe."),
    output_format: OutputFormat = typer.Option(OutputFormat.text, "--format", help="Output format of the summary."),
    select: Optional[List[str]] = typer.Option(None, "--select", help="Only fix findings of these rules."),
    ignore: Optional[List[str]] = typer.Option(None, "--ignore", help="Do not fix findings of these rules."),
    fail_on: FailOn = typer.Option(FailOn.error, "--fail-on", help="Lowest severity left after fixing that makes the exit code 1."),
    upstream: Optional[List[str]] = typer.Option(None, "--upstream", help=UPSTREAM_HELP),
    pr: bool = typer.Option(False, "--pr", help="For Hub repo ids: open the patch as a pull request on the Hub (needs HF_TOKEN); one per repository, never twice."),
    dry_run: bool = typer.Option(False, "--dry-run", help="With --pr: say what would be opened, open nothing."),
    from_file: Optional[str] = typer.Option(None, "--from", help="With --pr: read Hub repo ids from FILE, one a line ('-': stdin)."),
    jobs: int = typer.Option(1, "--jobs", "-j", min=1, help="With --pr --from: repositories handled in parallel."),
) -> None:
    """Write the minimal patch for fixable findings, then re-check and report what remains."""
    from hfdoctor.upstream import Upstream

    selects, ignores = split_list(select), split_list(ignore)
    check_selectors(selects + ignores)
    up = Upstream.from_options(upstream)
    targets = ([target] if target else []) + read_targets(from_file)
    if not targets:
        fail("give a TARGET (or --pr --from FILE)")
    hub = [t for t in targets if not os.path.isdir(t)]
    if pr or (diff and hub):
        from hfdoctor.fix.cli_hub import run_hub_fix

        raise typer.Exit(run_hub_fix(targets, pr=pr, diff=diff, dry_run=dry_run, unsafe_fixes=unsafe_fixes,
                                     select=selects, ignore=ignores, upstream=up, jobs=jobs,
                                     output_format=output_format.value, fail_on=Severity.parse(fail_on.value),
                                     console=stdout_console()))
    if len(targets) != 1 or dry_run:
        fail("--from, --jobs and --dry-run are for `fix --pr`; fix one directory at a time")
    from hfdoctor.fix import run_fix

    path = local_directory(targets[0], "fix")
    code = run_fix(
        path, diff=diff, unsafe_fixes=unsafe_fixes, select=selects, ignore=ignores, upstream=up,
        fail_on=Severity.parse(fail_on.value), output_format=output_format.value, console=stdout_console(),
    )
    raise typer.Exit(code)


@app.command()
def probe(
    target: Optional[str] = typer.Argument(None, help="Checkpoint directory whose weights to load, or a .gguf file (none with --endpoint: the endpoint alone)."),
    device: Device = typer.Option(Device.auto, "--device", help="Where to run the model."),
    max_new_tokens: int = typer.Option(96, "--max-new-tokens", min=1, help="Generation budget per check."),
    output_format: OutputFormat = typer.Option(OutputFormat.text, "--format", help="Output format."),
    trust_remote_code: bool = typer.Option(False, "--trust-remote-code", help="Allow the repository's own Python code to run (off by default)."),
    serve: bool = typer.Option(False, "--serve", help="Also probe through `transformers serve` started on 127.0.0.1, and compare."),
    endpoint: Optional[str] = typer.Option(None, "--endpoint", help="Also probe through this running OpenAI-compatible server (vLLM, SGLang, TGI...), and compare."),
    endpoint_model: Optional[str] = typer.Option(None, "--endpoint-model", help="The model name to request from --endpoint (default: its first listed model)."),
    seeded: bool = typer.Option(False, "--seeded", help="The server promises seeded determinism: seed-parity differences fail instead of being inconclusive."),
) -> None:
    """Load the weights and test behaviour: thinking on/off, stopping at eos, determinism."""
    from hfdoctor.probe import run_probe

    gguf_file = None
    if target is None:
        if endpoint is None:
            fail("give a TARGET (a checkpoint directory), or --endpoint URL to probe a running server alone")
        raise typer.Exit(run_probe(None, output_format=output_format.value, console=stdout_console(),
                                   display_target=endpoint, endpoint=endpoint, endpoint_model=endpoint_model,
                                   seeded=seeded))
    if os.path.isfile(target) and target.endswith(".gguf"):  # one GGUF: its folder is the repository
        path, gguf_file = os.path.dirname(os.path.abspath(target)), os.path.basename(target)
    else:
        path = local_directory(target, "probe")
    code = run_probe(
        path, device=device.value, max_new_tokens=max_new_tokens, output_format=output_format.value,
        trust_remote_code=trust_remote_code, console=stdout_console(), display_target=target, gguf_file=gguf_file,
        serve=serve, endpoint=endpoint, endpoint_model=endpoint_model, seeded=seeded,
    )
    raise typer.Exit(code)


@app.command("rules")
def list_rules(
    output_format: OutputFormat = typer.Option(OutputFormat.text, "--format", help="Output format."),
    markdown: bool = typer.Option(False, "--markdown", help="A Markdown table (README's rule table)."),
) -> None:
    """List every rule: code, name, default severity and what it flags."""
    from hfdoctor.rules import ALL_RULES

    if markdown:
        print("| code | name | severity | what it flags |\n|---|---|---|---|")
        for r in ALL_RULES:
            # The anchor is each rule's helpUri in SARIF (hfdoctor.report.sarif.rule_help_uri).
            print(f'| <a id="{r.code.lower()}"></a>{r.code} | `{r.name}` | {r.severity} | '
                  f"{r.summary.replace('|', chr(92) + '|')} |")
        return
    if output_format is OutputFormat.json:
        print(json.dumps([{"code": r.code, "rule": r.name, "severity": str(r.severity), "summary": r.summary}
                          for r in ALL_RULES], indent=2))
        return
    console = stdout_console()
    for r in ALL_RULES:
        console.print(f"[bold]{r.code:<8}[/bold] {r.name:<30} {str(r.severity):<8} {r.summary}", soft_wrap=True)


@app.command()
def explain(rule: str = typer.Argument(..., help="A rule code (TPL001) or name (missing-chat-template).")) -> None:
    """Print a rule's documentation."""
    from hfdoctor.rules import find_rule

    found = find_rule(rule)
    if found is None:
        fail(f"unknown rule {rule!r} (see `hfdoctor rules`)")
    print(f"{found.code} {found.name} (default severity: {found.severity})\n")
    print(found.doc)


@hook_app.command("install")
def hook_install(
    repo: Path = typer.Option(Path("."), "--repo", help="The git repository (default: the current directory)."),
    force: bool = typer.Option(False, "--force", help="Replace an existing pre-push hook that hfdoctor did not write."),
    fail_on: FailOn = typer.Option(FailOn.error, "--fail-on", help="Severity that blocks the push."),
) -> None:
    """Install a git pre-push hook that runs `hfdoctor check` on what each push carries.

    For each pushed ref, every rule judges the pushed commit (--git-rev: the tip, what gets
    served), and the blob rules (lfs-attributes: plain blobs over 10 MiB; unsafe-pickle:
    pickles that import code) also judge every blob that the pushed commits add
    (remote..local; every commit no remote has for a new branch), each blob once. The
    working tree is never read. Bypass once with `git push --no-verify`."""
    from hfdoctor.hook import HookError, install_pre_push

    try:
        path = install_pre_push(repo, force=force, fail_on=fail_on.value)
    except HookError as err:
        fail(str(err))
    print(f"installed {path}")


def main() -> None:
    # Repository data reaches the output (file names with undecodable bytes, JSON strings with
    # lone surrogates): whatever it holds, what hfdoctor prints is valid UTF-8, the odd
    # characters escaped (\udcff), never a UnicodeEncodeError.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
