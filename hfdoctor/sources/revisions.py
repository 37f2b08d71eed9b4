"""A Hub revision, as a user or a list of targets gives it, checked before it reaches a path or a URL.

A revision names a commit (40 or 64 hexadecimal digits), a branch or tag (git's
check-ref-format rules, one-level names allowed: `main`, `v1.0`, `release/2024`), or a
pull request (`refs/pr/N`). Such a name has no `..`, no component that starts with `.`,
no leading or trailing `/`, no control character, space, `~ ^ : ? * [ \\`, no `@{`, and does
not start with `-`: joined below a cache folder (`refs/NAME`, `snapshots/COMMIT`) it stays
there, and given to git or the Hub it is never an option. Anything else is refused with
exit 2, before any file or request.
"""

from __future__ import annotations

import string

from hfdoctor.bounded import patterns
from hfdoctor.sources.base import SourceError

MAX_REVISION_CHARS = 255
HEX_DIGITS = frozenset(string.hexdigits)
FORBIDDEN = frozenset(" ~^:?*[\\\x7f")


# A Hub repo id (`ORG/NAME`, or a legacy `NAME`), as it joins a URL path or a cache folder name
# (`models--ORG--NAME`): letters, digits, `_ . -`, never a path of its own; no `..`, and no `--`,
# which the Hub refuses too (`a--b/c` and `a/b--c` would share one cache folder).
REPO_ID = patterns.compile(r"[A-Za-z0-9][\w.\-]{0,95}(?:/[A-Za-z0-9][\w.\-]{0,95})?")


def is_repo_id(name: object) -> bool:
    return isinstance(name, str) and REPO_ID.fullmatch(name) is not None and ".." not in name and "--" not in name


def is_commit_id(revision: str) -> bool:
    """A full commit id: 40 (sha1) or 64 (sha256) hexadecimal digits."""
    return len(revision) in (40, 64) and set(revision) <= HEX_DIGITS


def ref_name_problem(name: str) -> str | None:
    """Why `name` is not a branch or tag name git would accept (check-ref-format
    --allow-onelevel), or None."""
    if not name or len(name) > MAX_REVISION_CHARS:
        return f"is empty or longer than {MAX_REVISION_CHARS} characters"
    if name.startswith("-"):
        return "starts with '-'"
    if name == "@" or "@{" in name:
        return "is '@' or holds '@{'"
    if not name.isprintable() or set(name) & FORBIDDEN:
        return "holds a control character, a space or one of ~ ^ : ? * [ \\"
    if name.startswith("/") or name.endswith(("/", ".")) or "//" in name or ".." in name:
        return "starts or ends with '/', ends with '.', or holds '//' or '..'"
    if any(part.startswith(".") or part.endswith(".lock") for part in name.split("/")):
        return "has a part that starts with '.' or ends with '.lock'"
    return None


def check_revision(revision: str) -> str:
    """`revision` when it is a commit id, a branch or tag name, or refs/pr/N; SourceError otherwise."""
    if not isinstance(revision, str):
        raise SourceError("the revision is not text")
    if is_commit_id(revision):
        return revision
    if revision.startswith("refs/pr/"):
        number = revision[len("refs/pr/"):]
        if number.isascii() and number.isdecimal() and len(number) <= 9:
            return revision
        raise SourceError(f"revision {revision[:60]!r} is not a pull request (refs/pr/N)")
    problem = ref_name_problem(revision)
    if problem is not None:
        raise SourceError(f"revision {revision[:60]!r} is not a commit id, a branch or tag name, or refs/pr/N: "
                          f"it {problem}")
    return revision
