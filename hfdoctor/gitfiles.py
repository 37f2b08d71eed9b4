"""What git would commit from a work tree, read without running git in it.

`git ls-files` in a repository under check would read that repository's .git/config, and
a config can make git run a program (core.fsmonitor). So for a plain directory hfdoctor
reads git's own files instead, as data:

- the index (`.git/index`, versions 2 to 4): the tracked paths;
- .gitignore files and `.git/info/exclude`, with gitignore(5) semantics (last match wins,
  deeper files win, a `!` re-includes, nothing under an ignored directory comes back);
- .gitattributes lines that route files through git-lfs.

Patterns are git's wildmatch, translated to RE2 (hfdoctor.patterns): matching is linear in
the path whatever the pattern, and a pattern RE2 refuses matches nothing. A `.git` that is
a file (a worktree or submodule) or an index this reader does not know gives None:
"unknown", and the rule that asked says nothing.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from hfdoctor import patterns

MAX_INDEX_BYTES = 256 * 1024 * 1024
MAX_IGNORE_BYTES = 1024 * 1024
MAX_RULES = 10_000


def wildmatch_regex(glob: str) -> str:
    """git's wildmatch pattern (no leading `/`, no trailing `/`) as a regex body over a path.

    `*` and `?` do not cross `/`; `**/` is any number of leading directories, `/**` anything
    below, `/**/` zero or more directories; `[...]` is a class (`[!...]` negated); `\\x` is x;
    an unterminated `[` is a literal.
    """
    out, i, n = [], 0, len(glob)
    while i < n:
        c = glob[i]
        if glob.startswith("**/", i) and (i == 0 or glob[i - 1] == "/"):
            out.append("(?:.*/)?")
            i += 3
        elif glob.startswith("**", i) and (i == 0 or glob[i - 1] == "/") and i + 2 == n:
            out.append(".*")
            i += 2
        elif c == "*":
            while i < n and glob[i] == "*":
                i += 1
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "\\" and i + 1 < n:
            out.append(patterns.escape(glob[i + 1]))
            i += 2
        elif c == "[":
            end, j = -1, i + 1
            if j < n and glob[j] in "!^":
                j += 1
            if j < n and glob[j] == "]":
                j += 1
            while j < n:
                if glob[j] == "\\" and j + 1 < n:
                    j += 2
                    continue
                if glob[j] == "]":
                    end = j
                    break
                j += 1
            if end < 0:
                out.append(patterns.escape(c))
                i += 1
                continue
            body = glob[i + 1:end]
            negate = body[:1] in ("!", "^")
            out.append("[" + ("^/" if negate else "") + _class_body(body[1:] if negate else body) + "]")
            i = end + 1
        else:
            out.append(patterns.escape(c))
            i += 1
    return "".join(out)


def _class_body(body: str) -> str:
    """The inside of a wildmatch `[...]` as an RE2 class: ranges kept, everything else literal."""
    out, k = [], 0
    while k < len(body):
        ch = body[k]
        if ch == "\\" and k + 1 < len(body):
            ch, k = body[k + 1], k + 1
            out.append("\\" + ch if ch in "\\[]^-" else ch)
        else:
            out.append("\\" + ch if ch in "\\[]^" else ch)
        k += 1
    return "".join(out)


@dataclass(frozen=True)
class PathRule:
    """One gitignore/gitattributes line: does it match a path, and what it says."""

    regex: object | None  # a compiled RE2 pattern over the path relative to `base`, or None (refused)
    base: str  # the directory of the file it came from ("" for the root), with a trailing "/"
    dir_only: bool
    value: bool  # ignore: not negated; attributes: routes to lfs

    def matches(self, rel: str, is_dir: bool) -> bool:
        if self.regex is None or (self.dir_only and not is_dir) or not rel.startswith(self.base):
            return False
        return self.regex.fullmatch(rel[len(self.base):]) is not None


def _rule(glob: str, base: str, value: bool) -> PathRule | None:
    dir_only = glob.endswith("/")
    glob = glob.rstrip("/")
    if not glob:
        return None
    anchored = "/" in glob
    glob = glob.lstrip("/")
    body = wildmatch_regex(glob)
    regex = patterns.compile_untrusted(body if anchored else f"(?:.*/)?{body}")
    return PathRule(regex, base, dir_only, value)


def _strip_trailing_spaces(line: str) -> str:
    stripped = line.rstrip(" ")
    if stripped.endswith("\\") and len(stripped) < len(line):
        return stripped + " "  # an escaped space is kept
    return stripped


def ignore_rules(text: str, base: str = "") -> list[PathRule]:
    """The rules of one .gitignore (or info/exclude) whose directory is `base` ("" or "dir/")."""
    rules = []
    for line in text.splitlines()[:MAX_RULES]:
        line = _strip_trailing_spaces(line)
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        if negate or line.startswith("\\!") or line.startswith("\\#"):
            line = line[1:]
        found = _rule(line, base, not negate)
        if found is not None:
            rules.append(found)
    return rules


def lfs_rules(text: str, base: str = "") -> list[PathRule]:
    """(pattern, routes to lfs) for each .gitattributes line that sets or unsets `filter`."""
    rules = []
    for line in text.splitlines()[:MAX_RULES]:
        parts = line.strip().split()
        if not parts or parts[0].startswith("#"):
            continue
        for attr in parts[1:]:
            if attr.startswith("filter="):
                found = _rule(parts[0], base, attr == "filter=lfs")
            elif attr in ("-filter", "!filter"):
                found = _rule(parts[0], base, False)
            else:
                continue
            if found is not None:
                rules.append(found)
    return rules


def last_match(rules: list[PathRule], rel: str, is_dir: bool = False) -> bool | None:
    """The value of the last rule matching `rel` (git: the last line wins), or None."""
    verdict = None
    for rule in rules:
        if rule.matches(rel, is_dir):
            verdict = rule.value
    return verdict


def routed_to_lfs(rel: str, rules: list[PathRule]) -> bool:
    return bool(last_match(rules, rel))


# --- the index -----------------------------------------------------------------------------


def _read_limited(path: Path, limit: int) -> bytes | None:
    try:
        if not path.is_file() or path.is_symlink() or path.stat().st_size > limit:
            return None
        return path.read_bytes()
    except OSError:
        return None


def _hash_size(git_dir: Path) -> int:
    config = _read_limited(git_dir / "config", MAX_IGNORE_BYTES) or b""
    return 32 if b"objectformat=sha256" in config.lower().replace(b" ", b"").replace(b"\t", b"") else 20


def tracked_paths(git_dir: Path) -> set[str] | None:
    """The paths of `git_dir`'s index (any stage), or None when it cannot be read as one."""
    data = _read_limited(git_dir / "index", MAX_INDEX_BYTES)
    if data is None:
        return set() if not (git_dir / "index").exists() else None
    if len(data) < 12 or data[:4] != b"DIRC":
        return None
    version, count = struct.unpack(">II", data[4:12])
    if version not in (2, 3, 4) or count > len(data) // 40:
        return None
    hash_size = _hash_size(git_dir)
    fixed = 40 + hash_size  # ctime, mtime, dev, ino, mode, uid, gid, size, then the object id
    paths: set[str] = set()
    at, previous = 12, b""
    try:
        for _ in range(count):
            start = at
            (flags,) = struct.unpack(">H", data[at + fixed:at + fixed + 2])
            at += fixed + 2
            if version >= 3 and flags & 0x4000:
                at += 2
            if version == 4:
                # git's offset varint: 7 bits a byte, big-endian, +1 per continuation byte
                byte = data[at]
                at += 1
                strip = byte & 0x7F
                while byte & 0x80:
                    byte = data[at]
                    at += 1
                    strip = ((strip + 1) << 7) | (byte & 0x7F)
                end = data.index(b"\0", at)
                if strip > len(previous):
                    return None
                name = previous[:len(previous) - strip] + data[at:end]
                at = end + 1
            else:
                end = data.index(b"\0", at)
                name = data[at:end]
                at = start + ((end - start) // 8 + 1) * 8  # 1 to 8 NULs pad the entry
            previous = name
            paths.add(name.decode("utf-8", "surrogateescape"))
    except (IndexError, ValueError, struct.error):
        return None
    return paths


# --- a work tree ----------------------------------------------------------------------------


def _ignore_rules_of(root: Path, git_dir: Path, files: list[str]) -> list[PathRule]:
    """info/exclude first, then every .gitignore from the root down (later rules win)."""
    rules = ignore_rules((_read_limited(git_dir / "info" / "exclude", MAX_IGNORE_BYTES) or b"").decode(
        "utf-8", "replace"))
    ignore_files = sorted((f for f in files if f == ".gitignore" or f.endswith("/.gitignore")),
                          key=lambda f: f.count("/"))
    for rel in ignore_files:
        text = (_read_limited(root / rel, MAX_IGNORE_BYTES) or b"").decode("utf-8", "replace")
        rules.extend(ignore_rules(text, rel[: -len(".gitignore")]))
    return rules


def ignored(rel: str, rules: list[PathRule]) -> bool:
    """gitignore(5): a path is ignored when it, or any directory above it, is."""
    parts = rel.split("/")
    for depth in range(1, len(parts)):
        if last_match(rules, "/".join(parts[:depth]), is_dir=True):
            return True
    return bool(last_match(rules, rel))


def committable(root: Path, files: list[str]) -> set[str] | None:
    """Of `files` (paths of the work tree at `root`), those a `git add -A` would commit:
    tracked, or untracked and not ignored. None when `root` is not a plain git work tree
    whose index this reader understands."""
    git_dir = root / ".git"
    if git_dir.is_symlink() or not git_dir.is_dir():
        return None
    tracked = tracked_paths(git_dir)
    if tracked is None:
        return None
    rules = _ignore_rules_of(root, git_dir, files)
    return {rel for rel in files if rel in tracked or not ignored(rel, rules)}


def lfs_filter_configured(root: Path) -> bool:
    """Whether git-lfs's clean filter is set up for this work tree: in its .git/config (read
    as text, never run), or in the user's global configuration (`git lfs install`)."""
    from hfdoctor.programs import global_git_config

    config = (_read_limited(root / ".git" / "config", MAX_IGNORE_BYTES) or b"").decode("utf-8", "replace")
    in_repo, section = False, ""
    for line in config.splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line.strip("[]").replace('"', "").replace(" ", ".").lower()
        elif section == "filter.lfs" and line.replace(" ", "").lower().startswith("clean="):
            in_repo = True
    return in_repo or bool(global_git_config("filter.lfs.clean"))

