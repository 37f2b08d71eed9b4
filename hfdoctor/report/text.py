"""The human writer: one line per finding, ruff-style, with rich colours on a terminal."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape

from hfdoctor.findings import Applicability, FixResult, Report, Severity, TargetError

STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}


def _location(target: str, file: str | None, line: int | None) -> str:
    if file is None:
        return target
    return f"{target.rstrip('/')}/{file}" + (f":{line}" if line else "")


def write_text(reports: list[Report | TargetError], console: Console) -> None:
    for report in reports:
        if isinstance(report, TargetError):
            console.print(f"[bold]{escape(report.target)}[/bold]: [bold red]error:[/bold red] {escape(report.message)}",
                          soft_wrap=True)
            continue
        console.print(f"[bold]{escape(report.target)}[/bold]  lineage: {lineage_text(report.lineage or {})}")
        for section, body in report.sections.items():
            write_section(console, section, body)
        for f in report.findings:
            fix = f"  [green]\\[fix: {f.fix.applicability}][/green]" if f.fix else ""
            console.print(
                f"{escape(_location(report.target, f.file, f.line))}: [{STYLE[f.severity]}]{f.severity}[/] "
                f"[bold]{f.code}[/bold] [dim]{f.rule}[/dim] {escape(f.message)}{fix}",
                soft_wrap=True,
            )
        for err in report.internal_errors:
            console.print(f"[bold red]internal error[/] {escape(err)} (please report this)", soft_wrap=True)
        s = report.summary()
        if report.findings:
            console.print(f"{s['error']} error(s), {s['warning']} warning(s), {s['info']} info; "
                          f"{s['fixable']} fixable with `hfdoctor fix`"
                          + (f" ({s['unsafe_fixable']} more with --unsafe-fixes)" if s["unsafe_fixable"] else ""))
        else:
            console.print("[green]no findings[/green]")


def lineage_text(lin: dict[str, Any]) -> str:
    """'qwen3 (hybrid), base model Qwen/Qwen3-8B, confidence high (evidence: config, tokenizer)'."""
    if not lin.get("family"):
        arch = f"{lin['architecture']} architecture, " if lin.get("architecture") else ""
        return f"[bold]{arch}family unknown[/bold] (no tokenizer or other evidence names a known family)"
    family = lin["family"] + (f" ({lin['variant']})" if lin.get("variant") else "")
    evidence = ", ".join(lin.get("evidence") or []) or "none"
    disagree = "".join(f"; {name} says {' / '.join(lin.get('by_source', {}).get(name, []))}"
                       for name in lin.get("disagree") or [])
    return (f"[bold]{escape(family)}[/bold], base model {escape(lin.get('base_model') or 'unknown')}, "
            f"confidence {lin.get('confidence', 'unknown')} (evidence: {escape(evidence)}{escape(disagree)})")


def write_section(console: Console, name: str, body: Any) -> None:
    """Extra sections (e.g. template capabilities) as `name: key=value, ...`."""
    if name == "compat" and isinstance(body, list):
        write_compat(console, body)
    elif isinstance(body, dict):
        parts = []
        for key, value in body.items():
            if isinstance(value, (dict, list)) and len(str(value)) > 80:
                continue
            parts.append(f"{key}={value}")
        console.print(f"  {escape(name)}: {escape(', '.join(parts))}", soft_wrap=True)


COMPAT_STYLE = {"loads": "green", "caveat": "yellow", "fails": "red", "unknown": "dim"}
WHY_CHARS = 240


def write_compat(console: Console, entries: list[dict[str, str]]) -> None:
    """`compat: transformers-5 loads, vllm caveat, ...`, then why for each engine not plainly loading."""
    statuses = ", ".join(f"{escape(e['engine'])} [{COMPAT_STYLE.get(e['status'], 'default')}]{e['status']}[/]"
                         for e in entries)
    console.print(f"  compat: {statuses}", soft_wrap=True)
    grouped: dict[tuple[str, str], list[str]] = {}  # engines that share a status and a reason share a line
    for e in entries:
        if e["status"] not in ("loads", "unknown"):  # unknown: "not verified" is in --format json
            grouped.setdefault((e["status"], e["why"]), []).append(e["engine"])
    for (status, why), engines in grouped.items():
        why = why if len(why) <= WHY_CHARS else why[:WHY_CHARS].rsplit(" ", 1)[0] + " …"  # never mid-word
        console.print(f"    {escape(', '.join(engines))} {status}: {escape(why)}", soft_wrap=True)


def write_fix_text(result: FixResult, console: Console) -> None:
    """What fix did (or, with --diff, would do), then what is left, as `check` shows it."""
    after = result.after
    preview = result.diff is not None
    verb = "would fix" if preview or not result.written else "fixed"
    if result.applied and result.files:
        files = ", ".join(result.files)
        console.print(f"[bold]{escape(after.target)}[/bold]: {verb} {len(result.applied)} finding(s) in {escape(files)}"
                      + ("; nothing written (--diff)" if preview else ""))
        for finding in result.applied:
            assert finding.fix is not None
            console.print(f"  [green]{verb}[/green] {finding.code} [dim]{finding.rule}[/dim] "
                          f"{escape(finding.file or '')}: {escape(finding.fix.title)}", soft_wrap=True)
    else:
        console.print(f"[bold]{escape(after.target)}[/bold]: nothing to fix")
    for reason in result.refused:
        console.print(f"  [yellow]not fixed[/yellow] {escape(reason)}", soft_wrap=True)
    for err in result.errors:
        console.print(f"[bold red]error:[/bold red] {escape(err)}", soft_wrap=True)
    unsafe = [f for f in after.findings if f.fix is not None and f.fix.applicability is Applicability.UNSAFE]
    if unsafe:
        console.print(f"  {len(unsafe)} more fix(es) available with --unsafe-fixes")
    if preview:
        console.print("left after applying this diff:")
    else:
        console.print("left after fixing:" if result.written or not result.files else "left (nothing was written):")
    write_text([after], console)


def write_rule_summary(counts: dict[str, Any], total: int, failed: int, console: Console) -> None:
    """After several targets: per rule, on how many repositories it fired."""
    console.print(f"\n[bold]{total} target(s)[/bold]: {total - failed} checked, {failed} could not be checked")
    if not counts:
        console.print("[green]no rule fired[/green]")
        return
    console.print(f"{'rule':<30} {'repos':>6}  findings (error/warning/info)")
    for name, count in counts.items():
        sev = count.severities
        console.print(f"{escape(name):<30} {count.repos:>6}  {sev['error']}/{sev['warning']}/{sev['info']}")
