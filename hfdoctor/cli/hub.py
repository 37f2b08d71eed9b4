"""The command-line side of `fix` on Hub repositories: --diff (print, write nothing), --pr
(open pull requests), --dry-run, and catalogs (--from FILE --jobs N, one line a repository).

Exit code: 2 when any repository could not be handled (no token, gated, unreachable, the
Hub refused); otherwise what is left after the patch, as for a directory (--fail-on).

What is printed holds the repository's and the Hub's text (names, messages, a Hub error's
body, the description's diff): every line goes through report.text's `say` (shown inert),
JSON through inert.dumps, and the patch of --diff through report.diff's `for_output`.
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor

from rich.console import Console

from hfdoctor.findings import Severity
from hfdoctor.fix.hub_pr import Outcome, PullRequestError, open_pull_request, outcome_line
from hfdoctor.report.diff import ESCAPED_NOTE, for_output, is_terminal
from hfdoctor.report.inert import dumps
from hfdoctor.report.text import say
from hfdoctor.sources.base import SourceError


def _token() -> str | None:
    from huggingface_hub import get_token

    return get_token()


def _one(target: str, *, pr: bool, dry_run: bool, **options) -> Outcome | str:
    try:
        return open_pull_request(target, token=_token() if pr and not dry_run else None,
                                 dry_run=dry_run or not pr, **options)
    except (PullRequestError, SourceError) as err:
        return f"{target}: {err}"
    except Exception as err:  # noqa: BLE001 - the Hub client's own errors: one repository's failure
        return f"{target}: {type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''}"


def run_hub_fix(targets: list[str], *, pr: bool, diff: bool, dry_run: bool, unsafe_fixes: bool, select, ignore,
                upstream, jobs: int, output_format: str, fail_on: Severity, console: Console) -> int:
    options = {"select": select, "ignore": ignore, "upstream": upstream, "unsafe_fixes": unsafe_fixes}
    with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(targets)))) as pool:
        results = list(pool.map(lambda t: _one(t, pr=pr, dry_run=dry_run, **options), targets))
    failed = False
    errors = Console(file=sys.stderr, highlight=False, soft_wrap=True)
    left: list[Severity] = []  # the severities of what remains after each patch
    for result in results:
        if isinstance(result, str):
            failed = True
            say(errors, "hfdoctor: ", result)
            continue
        left += [f.severity for f in result.plan.after.findings] if result.plan else []
        if output_format == "json":
            print(dumps({"target": result.repo_id, "commit": result.commit, "status": result.status,
                         "url": result.url, "title": result.title,
                         "fixed": [f.rule for f in (result.plan.applied if result.plan else [])]}))
        elif diff and not pr:
            terminal = is_terminal(sys.stdout)
            shown = for_output(result.diff, terminal=terminal)  # inert on a terminal; stop-commands under Actions
            sys.stdout.write(shown)
            if terminal and shown != result.diff:
                say(errors, ESCAPED_NOTE)
            say(errors, outcome_line(result))
        else:
            say(console, outcome_line(result))
            if result.status == "dry-run" and len(results) == 1:
                for text in result.description.rstrip("\n").split("\n"):
                    say(console, text)
    if failed:
        return 2
    return 1 if left and max(left) >= fail_on else 0
