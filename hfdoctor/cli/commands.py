"""The commands: thin functions over the library, each returning its exit code (CONTRACT.md)."""

from __future__ import annotations

import argparse
import json
import os

from hfdoctor.findings import Severity

from hfdoctor.cli.common import (command_options, fail, local_directory, read_targets, report_error, stderr_console,
                                 stdout_console)

# --- check -------------------------------------------------------------------------------


def check(args: argparse.Namespace) -> int:
    """Run every static rule. Never writes (but --summary and --write-baseline); never reads tensor data."""
    from hfdoctor.survey import check_many, rule_counts

    all_targets = list(args.targets) + read_targets(args.from_file)
    if not all_targets:
        fail("give at least one TARGET (or --from FILE)")
    if args.git_since is not None and args.git_rev is None:
        fail("--git-since needs --git-rev (the commit being pushed)")
    if args.baseline is not None and not os.path.isfile(args.baseline):
        fail(f"--baseline {args.baseline}: no such file (write it with --write-baseline)")
    options = command_options(args, revision=args.revision, git_rev=args.git_rev, cache=args.cache,
                              timeout_s=args.timeout, git_since=args.git_since, baseline=args.baseline,
                              use_baseline=args.write_baseline is None)
    workers = args.jobs or os.cpu_count() or 1
    display = text_display(args)
    results: list = [None] * len(all_targets)
    shown = 0  # text: targets print in the order given, each as soon as those before it are done
    for index, result in check_many(all_targets, options, workers):
        results[index] = result
        if args.format == "jsonl":
            stream(result, args.format, display)  # as each finishes (CONTRACT)
        while shown < len(results) and results[shown] is not None:
            if args.format != "jsonl":
                stream(results[shown], args.format, display)
            shown += 1
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
    if args.write_baseline is not None:
        return write_baseline(results, all_targets, args.write_baseline)
    return exit_code(results, Severity.parse(args.fail_on or "error"))


def write_baseline(results: list, targets: list[str], path: str) -> int:
    """--write-baseline: every finding of the targets checked, accepted; exit 2 when one could not be checked."""
    from hfdoctor.findings import TargetError
    from hfdoctor.lint import baseline
    from hfdoctor.report.text import say

    try:
        count = baseline.write(results, path, targets)
    except OSError as err:
        fail(f"cannot write --write-baseline {path}: {err.strerror or err}")
    checked = sum(not isinstance(r, TargetError) for r in results)
    say(stderr_console(), f"wrote {count} finding(s) of {checked} target(s) to {path}")
    return 2 if checked < len(results) else 0


def text_display(args: argparse.Namespace):
    from hfdoctor.report.text import Display

    return Display(show_info=args.show_info, quiet=args.quiet, verbose=args.verbose)


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
    """2 when a target could not be checked; 1 when one has findings at or above its fail-on (the
    command line's, else its configuration's: the report's `config` section says which)."""
    from hfdoctor.findings import TargetError

    if any(isinstance(r, TargetError) or r.internal_errors for r in results):
        return 2
    for r in results:
        own = r.sections.get("config", {}).get("fail_on")
        worst = r.worst()
        if worst is not None and worst >= (Severity.parse(own) if own else fail_on):
            return 1
    return 0


# --- fix, probe ----------------------------------------------------------------------------


def fix(args: argparse.Namespace) -> int:
    """Write the minimal patch for fixable findings, then re-check and report what remains."""
    from hfdoctor.knowledge.upstream import Upstream

    options = command_options(args)
    targets = list(args.targets) + read_targets(args.from_file)
    if not targets:
        fail("give a TARGET (or --from FILE)")
    hub = [t for t in targets if not os.path.isdir(t)]
    if args.pr or (args.diff and hub):
        from hfdoctor.cli.hub import run_hub_fix

        return run_hub_fix(targets, pr=args.pr, diff=args.diff, dry_run=args.dry_run, unsafe_fixes=args.unsafe_fixes,
                           select=list(options.select), ignore=list(options.ignore),
                           upstream=Upstream.from_options(list(options.upstream_dirs)), jobs=args.jobs,
                           output_format=args.format, fail_on=Severity.parse(args.fail_on or "error"),
                           console=stdout_console())
    if args.dry_run:
        fail("--dry-run is for `fix --pr`")
    if args.format == "json" and len(targets) > 1:
        fail("--format json takes one TARGET at a time (or use --pr for Hub repositories)")
    paths = [local_directory(target, "fix") for target in targets]  # every target, before anything is written
    return max(fix_directory(path, args, options) for path in paths)


def fix_directory(path: str, args: argparse.Namespace, options) -> int:
    """`fix` of one directory, with its configuration file (found as `check` finds it)."""
    from hfdoctor.config import ConfigError, merged_fail_on, merged_upstream
    from hfdoctor.fix import run_fix
    from hfdoctor.knowledge.upstream import Upstream
    from hfdoctor.lint import configured
    from hfdoctor.sources.local import LocalSource

    try:
        settings = configured.find_settings(LocalSource(path), path, options)
        rules = configured.rule_settings(options, settings)
    except ConfigError as err:
        report_error(f"{path}: configuration: {err} (--isolated fixes without it)")
        return 2
    return run_fix(path, diff=args.diff, unsafe_fixes=args.unsafe_fixes, select=None, ignore=None,
                   upstream=Upstream.from_options(list(merged_upstream(options, settings))),
                   fail_on=Severity.parse(merged_fail_on(options, settings)), output_format=args.format,
                   console=stdout_console(), display=text_display(args), settings=rules,
                   engines=configured.declared_engines(settings))


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
                     gguf_file=gguf_file, serve=args.serve, threads=args.threads, verbose=args.verbose,
                     cuda_graphs=not args.no_cuda_graphs, dtype=args.dtype, **served)


# --- rules, explain, hook install -------------------------------------------------------


def list_rules(args: argparse.Namespace) -> int:
    """List every rule: code, name, default severity, fix availability and what it flags."""
    from hfdoctor.lint.rules import ALL_RULES

    if args.markdown:
        print("| code | name | default severity | fix | what it flags |\n|---|---|---|---|---|")
        for r in ALL_RULES:
            print(f'| <a id="{r.code.lower()}"></a>{r.code} | `{r.name}` | {r.severity} | {r.fix} | '
                  f"{r.summary.replace('|', chr(92) + '|')} |")
        print(split_codes_markdown())
    elif args.format == "json":
        print(json.dumps([{"code": r.code, "rule": r.name, "severity": str(r.severity), "fix": str(r.fix),
                           "summary": r.summary, "aliases": list(r.aliases)} for r in ALL_RULES], indent=2))
    else:
        console = stdout_console()
        console.print(f"[bold]{'code':<8} {'name':<30} {'severity':<8} {'fix':<9} what it flags[/bold]", soft_wrap=True)
        for r in ALL_RULES:
            console.print(f"[bold]{r.code:<8}[/bold] {r.name:<30} {str(r.severity):<8} {str(r.fix):<9} {r.summary}",
                          soft_wrap=True)
    return 0


def split_codes_markdown() -> str:
    """The old codes that were split, under the rule table: each still selects and ignores its rules."""
    from hfdoctor.lint.rules import find_rule, split_codes

    lines = ["\nOld codes split in 0.4 stay aliases: `--select`, `--ignore` and `explain` take them, and they stand for"
             " every rule split from them."]
    for old, rules in split_codes().items():
        was = find_rule(old)
        lines.append(f"- {old}" + (f" (`{was.name}`)" if was is not None else "") + ": "
                     + ", ".join(f"[{r.code}](#{r.code.lower()}) `{r.name}`" for r in rules))
    return "\n".join(lines)


def explain(args: argparse.Namespace) -> int:
    """Print a rule's documentation."""
    from hfdoctor.lint.rules import alias_names, find_rule, standing_for

    found = find_rule(args.rule)
    if found is None:
        fail(f"unknown rule {args.rule!r} (see `hfdoctor rules`)")
    print(f"{found.code} {found.name} (default severity: {found.severity}; fix: {found.fix})\n")
    print(found.doc)
    split = standing_for(args.rule)
    if split:  # an old code: say every rule it still selects and ignores
        print(f"\n{args.rule.strip()} was one rule before 0.4; it now stands for these (--select and --ignore "
              "take them all):")
        for r in split:
            print(f"  {r.code} {r.name}: {r.summary}")
    elif found.aliases:
        print(f"\nAlias: {', '.join(alias_names(found))} (the code this rule was split from; --select and --ignore "
              "take it).")
    return 0


def hook_install(args: argparse.Namespace) -> int:
    """Install a git pre-push hook that runs `hfdoctor check` on what each push carries.

    For each pushed ref, every rule judges the pushed commit (--git-rev: the tip, what gets
    served), and the blob rules (lfs-attributes: plain blobs over 10 MiB;
    unsafe-pickle-in-history: pickles that import code) also judge every blob that the
    pushed commits add (remote..local; every commit no remote has for a new branch), each
    blob once. The working tree is never read. A pre-push hook that was already there
    (git-lfs's, which uploads the LFS objects; pre-commit's) is kept and runs after
    hfdoctor's check passes, so a blocked push uploads nothing. Bypass once with `git push --no-verify`."""
    from hfdoctor.cli.hook import install_pre_push, lfs_advice
    from hfdoctor.report.text import say

    path, chained = install_pre_push(args.repo, fail_on=args.fail_on, check_args=hook_check_args(args))
    # (a HookError: exit 2, cli.exit_code_of)
    say(stdout_console(), f"installed {path}")  # a checkout's path, a kept hook's name: shown inert
    say(stdout_console(), lfs_advice(args.repo, chained))
    return 0


def completion(args: argparse.Namespace) -> int:
    """Print a shell completion script (bash, zsh or fish).

    bash: `hfdoctor completion bash > ~/.local/share/bash-completion/completions/hfdoctor`
    zsh: `eval "$(hfdoctor completion zsh)"` in ~/.zshrc, after compinit
    fish: `hfdoctor completion fish > ~/.config/fish/completions/hfdoctor.fish`"""
    from hfdoctor.cli.completion import SCRIPTS, CommandLine

    print(SCRIPTS[args.shell](CommandLine(*args.command_line(), groups=args.groups)), end="")
    return 0


def hook_check_args(args: argparse.Namespace) -> tuple[str, ...]:
    """What `hook install` stores for the hook's `check`: the rules (checked now) and the
    configuration file (read and checked now, stored as an absolute path)."""
    from hfdoctor.cli.common import check_selectors, split_list

    selects, ignores = split_list(args.select), split_list(args.ignore)
    check_selectors(selects + ignores)
    stored: list[str] = []
    if selects:
        stored += ["--select", ",".join(selects)]
    if ignores:
        stored += ["--ignore", ",".join(ignores)]
    if args.config is not None:
        from hfdoctor.config import ConfigError, load_file
        from hfdoctor.lint.configured import validate

        try:
            validate(load_file(args.config))
        except ConfigError as err:
            fail(f"--config {err}")
        stored += ["--config", os.path.abspath(args.config)]
    return tuple(stored)


def hook_uninstall(args: argparse.Namespace) -> int:
    """Remove hfdoctor's pre-push hook and restore the hook it kept (git-lfs's, pre-commit's)."""
    from hfdoctor.cli.hook import uninstall_pre_push
    from hfdoctor.report.text import say

    path, restored = uninstall_pre_push(args.repo)  # a HookError: exit 2 (cli.exit_code_of)
    say(stdout_console(), f"restored {path} (the hook that was there before hfdoctor's)" if restored
        else f"removed {path}")
    return 0


