"""What the runner does for one task: check two revisions, compare, and say so on the Hub.

- A pull request: check its head (`refs/pr/N`, resolved to its commit now, so a late delivery
  never writes about an old head) and the head of the branch it targets; write one comment, or
  edit the one already there (found by its marker among our own comments, so it is found after
  a restart too); leave it alone when it already says exactly this. Closed and merged pull
  requests are left alone.
- A push to main: check the new commit and the old one. When the push introduced findings at or
  above --fail-on, open one discussion, unless an open discussion of ours already says these same
  findings. With --fix-prs, when it introduced findings with a safe fix, open one `fix --pr`
  pull request for those rules, unless a pull request of ours is already open.

Checks go through `lint.check.check_target` at a commit id (the same check as
`hfdoctor check ORG/NAME@COMMIT`: nothing from the repository runs, every read bounded), under
the runner's deadline, and are remembered by commit: a commit's files never change, and the Hub
sends several deliveries for one change (the pull request's event and its ref's).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from hfdoctor.bounded.memo import memo
from hfdoctor.findings import Applicability, Finding, Severity, TargetError
from hfdoctor.lint.check import Options, check_target
from hfdoctor.sources.revisions import check_revision
from hfdoctor.webhook.changes import Changes, compare
from hfdoctor.webhook.comment import PR_MARKER, headline, pull_request_comment, push_discussion, push_marker
from hfdoctor.webhook.hub import HubCalls, HubRefused
from hfdoctor.webhook.payload import ACTIVE_STATUSES, MAIN, Task, short

CHECKS_REMEMBERED = 64


@dataclass(frozen=True)
class Settings:
    """What every check and every decision of the runner depends on."""

    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    upstream_dirs: tuple[str, ...] = ()
    fail_on: Severity = Severity.ERROR
    check_timeout_s: float = 120.0
    fix_prs: bool = False

    def options(self) -> Options:
        return Options(select=self.select, ignore=self.ignore, upstream_dirs=self.upstream_dirs,
                       timeout_s=self.check_timeout_s)


def unusable_configuration(message: str) -> Finding:
    """What the comment says of a revision whose own configuration file could not be used."""
    return Finding("CFG001", "file-unreadable", Severity.ERROR, None, None, None,
                   f"the repository's own configuration could not be used, so this revision was checked "
                   f"without it: {message}")


class CheckFailed(Exception):
    """A revision could not be checked (unreachable, past its deadline): nothing is written."""


def branch_of(ref: str) -> str:
    """refs/heads/NAME -> NAME, checked as a revision (SourceError when it is not one)."""
    return check_revision(ref[len("refs/heads/"):] if ref.startswith("refs/heads/") else ref)


class Work:
    def __init__(self, settings: Settings, hub: HubCalls):
        self.settings = settings
        self.hub = hub
        self.checks = memo("webhook-checks", CHECKS_REMEMBERED)

    def run(self, task: Task) -> str:
        """Do the task; its verdict in one line. CheckFailed, HubUnavailable, HubRefused, SourceError."""
        if task.kind == "pull-request":
            return self.pull_request(task)
        return self.push(task)

    def findings(self, repo_id: str, commit: str) -> tuple[Finding, ...]:
        key = (repo_id, commit, self.settings)

        def check() -> tuple[Finding, ...]:
            target = f"{repo_id}@{commit}"
            result = check_target(target, self.settings.options())
            unusable = None
            if isinstance(result, TargetError) and result.kind == "repository-configuration":
                # The repository's own file is its author's text: one that cannot be used must not
                # keep the runner from saying what the revision holds (a broken .hfdoctor.toml beside
                # a payload would get no comment at all). Checked without it, and said.
                unusable = result.message
                result = check_target(target, replace(self.settings.options(), isolated=True))
            if isinstance(result, TargetError):
                raise CheckFailed(f"{repo_id}@{short(commit)} could not be checked: {result.message}")
            said = (unusable_configuration(unusable),) if unusable is not None else ()
            return said + tuple(result.findings)

        return self.checks.lookup(key, check)

    def compare(self, repo_id: str, base: str, head: str) -> Changes:
        return compare(list(self.findings(repo_id, base)), list(self.findings(repo_id, head)))

    # --- pull requests -----------------------------------------------------------------

    def pull_request(self, task: Task) -> str:
        repo_id, num = task.repo_id, task.pr_num
        details = self.hub.pull_request(repo_id, num)
        if not details.is_pull_request:
            return f"#{num} is a discussion, not a pull request: nothing to check"
        if details.status not in ACTIVE_STATUSES:
            return f"pull request #{num} is {details.status}: left alone"
        base_ref = branch_of(details.target_branch or task.base_ref or MAIN)
        timeout = self.settings.check_timeout_s
        head_sha = self.hub.commit_of(repo_id, f"refs/pr/{num}", timeout)
        base_sha = self.hub.commit_of(repo_id, base_ref, timeout)
        changes = self.compare(repo_id, base_sha, head_sha)
        text = pull_request_comment(repo_id, num, head_sha, base_ref, base_sha, changes)
        done = self.hub.call(f"comment on pull request #{num} of {repo_id}", self._post_or_edit, repo_id, num, text)
        return f"pull request #{num} at {short(head_sha)} {headline(changes)}: comment {done}"

    def _post_or_edit(self, repo_id: str, num: int, text: str) -> str:
        """One try of read, decide, write (HubCalls.call retries it whole)."""
        mine = self.hub.my_comment(self.hub.pull_request(repo_id, num), PR_MARKER)
        if mine is None:
            self.hub.comment(repo_id, num, text)
            return "posted"
        if mine.content.strip() == text.strip():
            return "unchanged"
        self.hub.edit(repo_id, num, mine.id, text)
        return "updated"

    # --- pushes --------------------------------------------------------------------------

    def push(self, task: Task) -> str:
        repo_id, old, new = task.repo_id, task.old_sha, task.new_sha
        changes = self.compare(repo_id, old, new)
        verdict = f"push {short(old)}..{short(new)} {headline(changes)}"
        if changes.introduced_at_least(self.settings.fail_on):
            title, body = push_discussion(repo_id, old, new, changes, self.settings.fail_on)
            marker = push_marker(changes.digest(self.settings.fail_on))
            verdict += "; " + self.hub.call(f"open a discussion on {repo_id}", self._discussion_once, repo_id,
                                            marker, title, body)
        if self.settings.fix_prs:
            verdict += self._fix_pull_request(repo_id, changes)
        return verdict

    def _discussion_once(self, repo_id: str, marker: str, title: str, body: str) -> str:
        """One try of read, decide, write: no second discussion for the same findings."""
        num = self.hub.discussion_with_marker(repo_id, marker)
        if num is not None:
            return f"discussion #{num} already says so"
        return f"opened discussion #{self.hub.open_discussion(repo_id, title, body)}"

    def _fix_pull_request(self, repo_id: str, changes: Changes) -> str:
        """`fix --pr` for the rules whose findings the push introduced with a safe fix; one open at a time."""
        from hfdoctor.fix.hub_pr import TITLE_PREFIX, PullRequestError, open_pull_request
        from hfdoctor.knowledge.upstream import Upstream
        from hfdoctor.sources.base import SourceError

        rules = sorted({f.code for f in changes.introduced
                        if f.fix is not None and f.fix.applicability is Applicability.SAFE})
        if not rules:
            return ""
        if any(pr.title.startswith(TITLE_PREFIX) for pr in self.hub.my_open_discussions(repo_id, pull_requests=True)):
            return "; a fix pull request of ours is already open"
        try:
            outcome = open_pull_request(repo_id, token=self.hub.token, select=rules, ignore=list(self.settings.ignore),
                                        upstream=Upstream.from_options(list(self.settings.upstream_dirs)))
        except (PullRequestError, SourceError) as err:
            raise HubRefused(f"fix pull request on {repo_id}: {err}") from None
        if outcome.status in ("opened", "exists"):
            return f"; fix pull request {outcome.status}: {outcome.url}"
        return f"; fix pull request: {outcome.status}"
