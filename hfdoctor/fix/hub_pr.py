"""`hfdoctor fix ORG/NAME --pr`: repair a repository where it lives, as a Hub pull request.

1. Read the repository at its current commit through huggingface_hub (hfdoctor.sources.hub):
   the metadata files, never the weights, into a private temporary folder, byte for byte.
2. Plan the same minimal patch as for a directory (hfdoctor.fix.plan): only the bytes the
   edits touch change.
3. Look for an open pull request of hfdoctor's (its title starts with TITLE_PREFIX) whose
   files already hold exactly these bytes: then say so and open nothing (idempotent).
4. Open one pull request with create_commit(create_pr=True, parent_commit=<the commit that
   was checked>). When the repository moved on meanwhile (the Hub refuses the stale parent,
   or its head is no longer the commit checked), start again at the new head: a patch is
   never committed on a parent it was not planned on.

A token (HF_TOKEN, or `hf auth login`) is needed to open a pull request; it is sent only to
the Hub endpoint and never printed. `--diff` and `--dry-run` need none and write nothing.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from hfdoctor.findings import Applicability
from hfdoctor.fix.plan import Plan, plan_fixes
from hfdoctor.fix.write import UnsafeWrite, writable_path
from hfdoctor.report.diff import unified_diff
from hfdoctor.report.inert import code_fence, code_span, visible
from hfdoctor.sources.base import SourceError, Unreadable
from hfdoctor.sources.hub import HubSource, endpoint

TITLE_PREFIX = "hfdoctor: "
# Files a fix never writes and a check of the metadata does not need whole: weights and
# other large binaries stay on the Hub (their findings come from `check`, by range reads).
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".onnx", ".h5", ".msgpack", ".pkl",
                   ".joblib", ".npz", ".npy", ".tflite", ".mlmodel", ".zip", ".tar", ".gz", ".7z")
MAX_METADATA_FILE = 64 * 1024 * 1024
MAX_ATTEMPTS = 3  # the head moved while we planned: plan again, this many times at most


class PullRequestError(Exception):
    """Nothing was opened; the message says why (exit 2)."""


@dataclass
class Outcome:
    repo_id: str
    commit: str  # the commit the patch was planned on
    status: str  # opened | exists | nothing-to-fix | dry-run
    url: str | None = None
    plan: Plan | None = None
    diff: str = ""
    description: str = ""
    title: str = ""


def parse_target(target: str) -> tuple[str, str | None]:
    repo_id, _, revision = target.partition("@")
    return repo_id, revision or None


def snapshot(source: HubSource, into: Path) -> None:
    """The repository's metadata files at the pinned commit, byte for byte."""
    for rel, entry in source.entries().items():
        if not entry.is_file or rel.lower().endswith(WEIGHT_SUFFIXES) or (entry.size or 0) > MAX_METADATA_FILE:
            continue
        try:
            path = writable_path(into, rel)  # a listed name like ../x never leaves the scratch folder
            data = source.read(rel, MAX_METADATA_FILE)
        except (Unreadable, UnsafeWrite):
            continue  # check reports it; a fix never writes what it could not read
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def plan_on_hub(repo_id: str, revision: str | None, *, token: str | None, select, ignore, upstream,
                unsafe_fixes: bool) -> tuple[HubSource, Plan, tempfile.TemporaryDirectory]:
    source = HubSource(repo_id, revision, token=token)
    scratch = tempfile.TemporaryDirectory(prefix="hfdoctor-pr-")
    folder = Path(scratch.name) / repo_id.replace("/", "--")
    folder.mkdir(parents=True)
    snapshot(source, folder)
    plan = plan_fixes(folder, select=select, ignore=ignore, upstream=upstream, unsafe_fixes=unsafe_fixes)
    return source, plan, scratch


def title_of(plan: Plan) -> str:
    rules = list(dict.fromkeys(f.rule for f in plan.applied))
    return visible(TITLE_PREFIX + "fix " + ", ".join(rules))


def description_of(repo_id: str, commit: str, plan: Plan, diff: str, unsafe_fixes: bool) -> str:
    """The pull request's Markdown, which the Hub renders: every string from the repository or
    the Hub (names, messages, fix titles, the diff) is inert there, in a code span or a fenced
    block that nothing inside can close, so it makes no link, mention, HTML or markup."""
    lines = [f"This pull request was opened by {code_span(f'hfdoctor fix {repo_id} --pr')} on commit "
             f"{code_span(commit)}.", "", "## What it fixes", ""]
    for finding in plan.applied:
        where = finding.file or repo_id
        lines.append(f"- **{finding.code} {finding.rule}** ({code_span(where)}): {code_span(finding.message)}")
        if finding.fix is not None:
            lines.append(f"  - change: {code_span(finding.fix.title)}")
    lines += ["", "## The change", "", "Only the bytes below change; every other byte of these files is kept.", "",
              code_fence(diff.rstrip("\n"), "diff"), ""]
    left_alone = [f for f in plan.after.findings if f.severity.name != "INFO"]
    unsafe = [f for f in left_alone if f.fix is not None and f.fix.applicability is Applicability.UNSAFE]
    if left_alone or plan.refused:
        lines += ["## Left alone", ""]
        for f in left_alone:
            why = ("its fix is marked unsafe (run with --unsafe-fixes to include it)" if f in unsafe and
                   not unsafe_fixes else "no automatic fix")
            lines.append(f"- {f.code} {f.rule} ({code_span(f.file or repo_id)}), {why}: {code_span(f.message)}")
        for refusal in plan.refused:
            lines.append(f"- refused: {code_span(refusal)}")
        lines.append("")
    lines += ["Check this pull request's revision yourself: "
              f"{code_span(f'hfdoctor check {repo_id}@refs/pr/<number>')}. "
              f"{code_span('hfdoctor explain CODE')} says why each rule matters."]
    return "\n".join(lines) + "\n"


def existing_pr(api, repo_id: str, changed: dict[str, bytes], token: str | None) -> str | None:
    """The URL of an open hfdoctor pull request whose files already hold these bytes."""
    for discussion in api.get_repo_discussions(repo_id, discussion_type="pull_request", discussion_status="open"):
        if not discussion.title.startswith(TITLE_PREFIX):
            continue
        try:
            source = HubSource(repo_id, f"refs/pr/{discussion.num}", token=token)
            if all(source.read(rel, MAX_METADATA_FILE) == data for rel, data in changed.items()):
                return discussion.url
        except (SourceError, Unreadable):
            continue
    return None


def open_pull_request(target: str, *, token: str | None, select=None, ignore=None, upstream=None,
                      unsafe_fixes: bool = False, dry_run: bool = False) -> Outcome:
    """Plan the patch at the repository's head and open it as a pull request (see the module)."""
    from huggingface_hub import CommitOperationAdd, HfApi
    from huggingface_hub.errors import HfHubHTTPError

    repo_id, revision = parse_target(target)
    if revision not in (None, "main") and not dry_run:
        raise PullRequestError(f"{target}: a pull request targets main; check other revisions with `check`")
    if token is None and not dry_run:
        raise PullRequestError("opening a pull request needs a Hub token: set HF_TOKEN (or log in with "
                               "`hf auth login`); nothing was opened")
    api = HfApi(endpoint=endpoint(), token=token)
    for _ in range(MAX_ATTEMPTS):
        source, plan, scratch = plan_on_hub(repo_id, revision, token=token, select=select, ignore=ignore,
                                               upstream=upstream, unsafe_fixes=unsafe_fixes)
        with scratch:
            diff = unified_diff(plan.original, plan.changed)
            outcome = Outcome(repo_id, source.commit, "nothing-to-fix", plan=plan, diff=diff)
            if not plan.changed:
                return outcome
            outcome.title = title_of(plan)
            outcome.description = description_of(repo_id, source.commit, plan, diff, unsafe_fixes)
            if dry_run:
                outcome.status = "dry-run"
                return outcome
            try:
                found = existing_pr(api, repo_id, plan.changed, token)
            except HfHubHTTPError as err:
                raise PullRequestError(f"{repo_id}: cannot list its pull requests: {_status(err)}") from None
            if found is not None:
                outcome.status, outcome.url = "exists", found
                return outcome
            head = HubSource(repo_id, token=token).commit  # the listing, read within hfdoctor's bounds
            if head != source.commit:
                continue  # the repository moved on while we planned: plan again at its head
            operations = [CommitOperationAdd(rel, data) for rel, data in sorted(plan.changed.items())]
            try:
                info = api.create_commit(repo_id, operations, commit_message=outcome.title,
                                         commit_description=outcome.description, create_pr=True,
                                         parent_commit=source.commit)
            except HfHubHTTPError as err:
                if _code(err) in (409, 412):
                    continue  # a commit landed between our check and this one: plan again
                raise PullRequestError(f"{repo_id}: the Hub refused the pull request: {_status(err)}") from None
            outcome.status, outcome.url = "opened", info.pr_url
            return outcome
    raise PullRequestError(f"{repo_id} kept changing while hfdoctor planned the patch ({MAX_ATTEMPTS} attempts); "
                           "nothing was opened")


def _code(err) -> int | None:
    response = getattr(err, "response", None)
    return getattr(response, "status_code", None)


def _status(err) -> str:
    code = _code(err)
    message = str(err).splitlines()[0][:200] if str(err) else type(err).__name__
    return f"HTTP {code}: {message}" if code else message


def outcome_line(outcome: Outcome) -> str:
    """One line per repository (catalog runs); the caller prints it through report.text's `say`,
    which shows the Hub's text in it (a URL, a commit) inert."""
    n = len(outcome.plan.applied) if outcome.plan else 0
    what = {"opened": f"opened {outcome.url}", "exists": f"already open: {outcome.url}",
            "nothing-to-fix": "nothing to fix", "dry-run": f"would open \"{outcome.title}\" ({n} fix(es))"}
    return f"{outcome.repo_id}@{outcome.commit[:12]}: {what[outcome.status]}"

