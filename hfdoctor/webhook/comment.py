"""The text the runner writes on the Hub: the pull request comment and the push discussion.

Both are Markdown, which the Hub renders. Every string from the repository or the Hub (file
names, messages, revisions, the repository's name) is inert there, as in `fix --pr`
descriptions: in a code span that nothing inside can close, so it makes no link, mention, HTML
or markup (hfdoctor.report.inert). Codes, rule names and severities are hfdoctor's own.

Each text starts with a hidden marker (an HTML comment, which the Hub does not show) by which
the runner finds its own comment or discussion again when it reads the pull request or the
repository's discussions: after a restart, or on another replica, the Hub is the memory. A push
discussion's marker also names the findings it is about (changes.Changes.digest).

The lists are bounded (MAX_LISTED findings a section, MAX_MESSAGE characters a message): a
repository with thousands of findings still gets a comment of a few kilobytes.
"""

from __future__ import annotations

from collections import Counter

from hfdoctor import __version__
from hfdoctor.findings import Finding, Severity
from hfdoctor.report.inert import code_span
from hfdoctor.webhook.changes import Changes
from hfdoctor.webhook.payload import short

PR_MARKER = "<!-- hfdoctor-webhook:pull-request -->"
PUSH_MARKER_PREFIX = "<!-- hfdoctor-webhook:push findings="
DISCUSSION_TITLE_PREFIX = "hfdoctor: "
MAX_LISTED = 25
MAX_MESSAGE = 300


def push_marker(digest: str) -> str:
    return f"{PUSH_MARKER_PREFIX}{digest} -->"


def counted(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 or what == "info" else f"{n} {what}s"


def severity_counts(findings: list[Finding]) -> str:
    counts = Counter(f.severity for f in findings)
    parts = [counted(counts[s], str(s)) for s in (Severity.ERROR, Severity.WARNING, Severity.INFO) if counts[s]]
    return ", ".join(parts) if parts else "no finding"


def finding_line(finding: Finding) -> str:
    message = finding.message if len(finding.message) <= MAX_MESSAGE else finding.message[:MAX_MESSAGE] + "..."
    where = f" in {code_span(finding.file)}" if finding.file else ""
    return f"- **{finding.severity}** {finding.code} `{finding.rule}`{where}: {code_span(message)}"


def finding_list(findings: list[Finding]) -> list[str]:
    shown = sorted(findings, key=lambda f: (-int(f.severity), f.code, f.file or ""))
    lines = [finding_line(f) for f in shown[:MAX_LISTED]]
    if len(shown) > MAX_LISTED:
        lines.append(f"- and {len(shown) - MAX_LISTED} more (`hfdoctor check` lists them all)")
    return lines


def loud(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity > Severity.INFO]


def headline(changes: Changes) -> str:
    """What the change did, as the predicate of "this pull request ..." or "push ...": only errors and
    warnings count here (info moves are in the collapsed line)."""
    introduced, fixed = loud(changes.introduced), loud(changes.fixed)
    said = "introduces " + severity_counts(introduced) if introduced else "introduces no error or warning"
    return said + (" and fixes " + severity_counts(fixed) if fixed else "")


def unchanged_line(changes: Changes) -> list[str]:
    """The rest, in one collapsed line: what both revisions have, and the info findings that moved."""
    info_moved = [f for f in changes.introduced + changes.fixed if f.severity is Severity.INFO]
    summary = f"Unchanged: {severity_counts(changes.unchanged)} at both revisions"
    if info_moved:
        new = sum(f in changes.introduced for f in info_moved)
        summary += f"; info: {new} new, {len(info_moved) - new} gone"
    rules = Counter((f.severity, f.code, f.rule) for f in changes.unchanged)
    lines = [f"- {severity} {code} `{rule}`" + (f" ×{n}" if n > 1 else "")
             for (severity, code, rule), n in sorted(rules.items(), key=lambda kv: (-int(kv[0][0]), kv[0][1]))]
    if not lines:
        return [summary + "."]
    if len(lines) > MAX_LISTED:
        lines = lines[:MAX_LISTED] + [f"- and {len(lines) - MAX_LISTED} more rules"]
    return [f"<details><summary>{summary}</summary>", "", *lines, "", "</details>"]


def pull_request_comment(repo_id: str, num: int, head_sha: str, base_ref: str, base_sha: str,
                         changes: Changes) -> str:
    """The one comment on pull request `num`: what it introduces, what it fixes, the rest collapsed."""
    lines = [PR_MARKER, f"**hfdoctor**: this pull request {headline(changes)}.", "",
             f"Checked {code_span(f'refs/pr/{num}')} at {code_span(short(head_sha))} against "
             f"{code_span(base_ref)} at {code_span(short(base_sha))}.", ""]
    if loud(changes.introduced):
        lines += ["**Introduces** (new at the head of this pull request):", *finding_list(loud(changes.introduced)), ""]
    if loud(changes.fixed):
        lines += ["**Fixes** (gone at the head of this pull request):", *finding_list(loud(changes.fixed)), ""]
    lines += unchanged_line(changes)
    lines += ["", f"<sub>hfdoctor {__version__}: this comment is updated when the pull request changes. "
              f"{code_span(f'hfdoctor check {repo_id}@refs/pr/{num}')} reproduces it; "
              f"{code_span('hfdoctor explain CODE')} says why a rule matters.</sub>"]
    return "\n".join(lines) + "\n"


def push_discussion(repo_id: str, old_sha: str, new_sha: str, changes: Changes, fail_on: Severity
                    ) -> tuple[str, str]:
    """The title and body of the discussion about a push that introduced findings at or above fail_on."""
    introduced = changes.introduced_at_least(fail_on)
    title = f"{DISCUSSION_TITLE_PREFIX}a push to main introduced {severity_counts(introduced)}"
    lines = [push_marker(changes.digest(fail_on)),
             f"The push to {code_span('main')} from {code_span(short(old_sha))} to {code_span(short(new_sha))} "
             f"introduced {severity_counts(introduced)}:", "", *finding_list(introduced), ""]
    others = [f for f in loud(changes.introduced) if f not in introduced]
    if others:
        lines += ["It also introduced:", *finding_list(others), ""]
    if loud(changes.fixed):
        lines += ["It fixed:", *finding_list(loud(changes.fixed)), ""]
    lines += [f"{code_span(f'hfdoctor check {repo_id}@{new_sha}')} reproduces this; "
              f"{code_span('hfdoctor explain CODE')} says why a rule matters. hfdoctor opens no second "
              "discussion for these findings while this one is open."]
    return title, "\n".join(lines) + "\n"
