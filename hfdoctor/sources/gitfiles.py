"""What git would commit from a work tree, read without running git in it.

`git ls-files` in a repository under check would read that repository's .git/config, and
a config can make git run a program (core.fsmonitor). So for a plain directory hfdoctor
reads git's own files instead, as data:

- the index (`.git/index`, versions 2 to 4): the tracked paths;
- .gitignore files and `.git/info/exclude`, with gitignore(5) semantics (last match wins,
  deeper files win, a `!` re-includes, nothing under an ignored directory comes back);
- .gitattributes lines that route files through git-lfs.

Patterns are git's wildmatch, translated to RE2 (hfdoctor.bounded.patterns): matching is linear in
the path whatever the pattern, and a pattern RE2 refuses matches nothing. Every reading is
bounded and one pass: the index by size and by how far a version 4 index's paths expand,
the ignore rules by bytes, lines and a count of pattern matches (RuleSet answers names,
paths and `*.ext` by lookup, so real ignore files cost almost nothing). A `.git` that is a
file (a worktree or submodule), a file reached through a link that leaves, an index this
reader does not know, or rules past a bound give None: "unknown", and the rule that asked
says nothing.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from hfdoctor.bounded import patterns
from hfdoctor.bounded.budget import NotReadable, read_regular_file

MAX_INDEX_BYTES = 64 * 1024 * 1024  # about 600,000 paths; hfdoctor walks at most 200,000 files
MAX_PATH_BYTES = 4096  # PATH_MAX: git cannot check out a longer path
MAX_EXPANDED_BYTES = 64 * 1024 * 1024  # all the paths of a version 4 index, expanded
MAX_IGNORE_BYTES = 1024 * 1024  # of one ignore file, and of all of a work tree's together
MAX_RULES = 10_000  # of one file, and of all of a work tree's together
# Pattern matches (not lookups) one work tree's ignore rules may take, about 2 s; compiling
# a pattern costs about as much as 25 matches.
MAX_MATCHES = 100_000
COMPILE_COST = 25


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
            out.append(c if c.isascii() and (c.isalnum() or c == "_") else patterns.escape(c))
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


_UNCOMPILED = object()


class PathRule:
    """One gitignore/gitattributes line: does it match a path, and what it says.

    Its regex is compiled when first asked for (RuleSet answers most paths by dictionary
    lookups, and compiling ten thousand patterns takes seconds)."""

    __slots__ = ("base", "dir_only", "value", "glob", "anchored", "_regex")

    def __init__(self, glob: str, anchored: bool, base: str, dir_only: bool, value: bool):
        self.base = base  # the directory of the file it came from ("" for the root), with a trailing "/"
        self.dir_only = dir_only
        self.value = value  # ignore: not negated; attributes: routes to lfs
        self.glob = glob  # the pattern, without its leading and trailing `/`
        self.anchored = anchored  # it held a `/`: matched against the whole path below `base`
        self._regex = _UNCOMPILED

    @property
    def source(self) -> str:
        """The regex over the path relative to `base`."""
        body = wildmatch_regex(self.glob)
        return body if self.anchored else f"(?:.*/)?{body}"

    @property
    def regex(self):
        """The compiled RE2 pattern, or None (refused: it matches nothing)."""
        if self._regex is _UNCOMPILED:
            self._regex = patterns.compile_untrusted(self.source)
        return self._regex

    def matches(self, rel: str, is_dir: bool) -> bool:
        if (self.dir_only and not is_dir) or not rel.startswith(self.base) or self.regex is None:
            return False
        return self.regex.fullmatch(rel[len(self.base):]) is not None


def _rule(glob: str, base: str, value: bool) -> PathRule | None:
    dir_only = glob.endswith("/")
    glob = glob.rstrip("/")
    if not glob:
        return None
    anchored = "/" in glob
    return PathRule(glob.lstrip("/"), anchored, base, dir_only, value)


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


class RuleSet:
    """Rules indexed so that finding the last one that matches a path is cheap.

    A path is only ruled by files in its own directories, so rules are grouped by `base`.
    Within a base, a literal name (`__pycache__`), a literal path (`/build/out`) and a
    literal suffix (`*.pyc`) are dictionary lookups; only other patterns are matched one by
    one, last first, stopping at the first that matches. Those matches are counted: past
    `max_matches` a query raises TooManyMatches (the caller says "unknown"), so a flood of
    patterns over a flood of files stays within a bounded amount of work.
    """

    def __init__(self, rules: list[PathRule], max_matches: int | None = None):
        self.bases: dict[str, _Bucket] = {}
        for index, rule in enumerate(rules):
            self.bases.setdefault(rule.base, _Bucket()).add(index, rule)
        self.matches_left = max_matches

    def last(self, rel: str, is_dir: bool = False) -> bool | None:
        """The value of the last rule matching `rel` (git: the last line wins), or None."""
        best: tuple[int, bool] | None = None
        if "" in self.bases:
            best = self.bases[""].last(self, rel, is_dir, best)
        at = rel.find("/")
        while at >= 0:
            base = rel[: at + 1]
            if base in self.bases:
                best = self.bases[base].last(self, rel[at + 1:], is_dir, best)
            at = rel.find("/", at + 1)
        return None if best is None else best[1]

    def charge(self, cost: int) -> None:
        if self.matches_left is not None:
            self.matches_left -= cost
            if self.matches_left < 0:
                raise TooManyMatches()


class TooManyMatches(Exception):
    """More pattern matches than the reader allows itself: the answer is unknown."""


_WILD = frozenset("*?[\\")


class _Bucket:
    """The rules of one base directory (RuleSet)."""

    def __init__(self) -> None:
        # key -> (last index of any rule, its value), (last index of a rule for files too, its value)
        self.paths: dict[str, list] = {}
        self.names: dict[str, list] = {}
        self.suffixes: dict[str, list] = {}
        self.suffix_lengths: set[int] = set()
        self.general: list[tuple[int, PathRule]] = []

    def add(self, index: int, rule: PathRule) -> None:
        glob = rule.glob
        if len(glob) > patterns.MAX_PATTERN_CHARS // 4 and len(rule.source) > patterns.MAX_PATTERN_CHARS:
            return  # what compile_untrusted refuses matches nothing
        if not glob.isprintable():  # (a lone surrogate: the regex decides, as it would)
            self.general.append((index, rule))
            return
        if not (set(glob) & _WILD):
            table = self.paths if rule.anchored else (self.names if "/" not in glob else None)
            if table is not None:
                self._put(table, glob, index, rule)
                return
        tail = glob[1:]
        if not rule.anchored and glob.startswith("*") and tail and not (set(tail) & _WILD) and "/" not in tail:
            self._put(self.suffixes, tail, index, rule)
            self.suffix_lengths.add(len(tail))
            return
        self.general.append((index, rule))

    @staticmethod
    def _put(table: dict[str, list], key: str, index: int, rule: PathRule) -> None:
        slot = table.setdefault(key, [None, None])
        slot[0] = (index, rule.value)
        if not rule.dir_only:
            slot[1] = (index, rule.value)

    def last(self, rules: RuleSet, rel: str, is_dir: bool, best: tuple[int, bool] | None) -> tuple[int, bool] | None:
        """The later of `best` and the last rule of this base matching `rel` (relative to the base)."""
        pick = 0 if is_dir else 1
        name = rel.rpartition("/")[2]
        found = [self.paths.get(rel), self.names.get(name)]
        found += [self.suffixes.get(name[len(name) - n:]) for n in self.suffix_lengths if n <= len(name)]
        for slot in found:
            if slot is not None and slot[pick] is not None and (best is None or slot[pick][0] > best[0]):
                best = slot[pick]
        for index, rule in reversed(self.general):
            if best is not None and index < best[0]:
                break
            if rule.dir_only and not is_dir:
                continue
            rules.charge(COMPILE_COST if rule._regex is _UNCOMPILED else 1)
            if rule.regex is not None and rule.regex.fullmatch(rel) is not None:
                return (index, rule.value)
        return best


def _as_rule_set(rules: list[PathRule] | RuleSet) -> RuleSet:
    return rules if isinstance(rules, RuleSet) else RuleSet(rules)


def last_match(rules: list[PathRule] | RuleSet, rel: str, is_dir: bool = False) -> bool | None:
    """The value of the last rule matching `rel` (git: the last line wins), or None."""
    return _as_rule_set(rules).last(rel, is_dir)


def routed_to_lfs(rel: str, rules: list[PathRule] | RuleSet) -> bool:
    return bool(last_match(rules, rel))


# --- the index -----------------------------------------------------------------------------


def _inside(path: Path, root: Path) -> bool:
    real, top = os.path.realpath(path), os.path.realpath(root)
    return real == top or real.startswith(top.rstrip(os.sep) + os.sep)


def _read_limited(path: Path, limit: int, root: Path | None) -> bytes | None:
    """The bytes of the regular file `path` (never through a symlink), when it is no larger
    than `limit` and, given a `root`, really lies inside it (no directory on the way a link
    that leaves); None otherwise."""
    if root is not None and not _inside(path, root):
        return None
    try:
        return read_regular_file(path, limit, follow_symlinks=False)
    except NotReadable:
        return None


def _hash_size(git_dir: Path) -> int:
    config = _read_limited(git_dir / "config", MAX_IGNORE_BYTES, git_dir) or b""
    return 32 if b"objectformat=sha256" in config.lower().replace(b" ", b"").replace(b"\t", b"") else 20


def tracked_paths(git_dir: Path, wanted: set[str] | None = None) -> set[str] | None:
    """The paths of `git_dir`'s index (any stage), or None when it cannot be read as one.

    With `wanted`, only those of its paths (the memory is then bounded by the caller's
    list). The reading is one pass: a version 4 index, whose paths share prefixes, may
    expand to at most MAX_PATH_BYTES a path and MAX_EXPANDED_BYTES in all; an index that
    claims more is not one git wrote (None)."""
    if not (git_dir / "index").exists():
        return set()
    data = _read_limited(git_dir / "index", MAX_INDEX_BYTES, git_dir)
    if data is None or len(data) < 12 or data[:4] != b"DIRC":
        return None
    version, count = struct.unpack(">II", data[4:12])
    fixed = 40 + _hash_size(git_dir)  # ctime, mtime, dev, ino, mode, uid, gid, size, then the object id
    if version not in (2, 3, 4) or count > len(data) // (fixed + 4):
        return None
    paths: set[str] = set()
    at, previous, expanded = 12, b"", 0
    try:
        for _ in range(count):
            start = at
            (flags,) = struct.unpack(">H", data[at + fixed:at + fixed + 2])
            at += fixed + 2
            if version >= 3 and flags & 0x4000:
                at += 2
            if version == 4:
                # git's offset varint: 7 bits a byte, big-endian, +1 per continuation byte
                byte, shifts = data[at], 0
                at += 1
                strip = byte & 0x7F
                while byte & 0x80:
                    byte = data[at]
                    at += 1
                    shifts += 1
                    if shifts > 4:
                        return None
                    strip = ((strip + 1) << 7) | (byte & 0x7F)
                end = data.index(b"\0", at)
                if strip > len(previous) or len(previous) - strip + end - at > MAX_PATH_BYTES:
                    return None
                name = previous[:len(previous) - strip] + data[at:end]
                at = end + 1
            else:
                end = data.index(b"\0", at)
                name = data[at:end]
                at = start + ((end - start) // 8 + 1) * 8  # 1 to 8 NULs pad the entry
            expanded += len(name)
            if len(name) > MAX_PATH_BYTES or expanded > MAX_EXPANDED_BYTES:
                return None
            previous = name
            path = name.decode("utf-8", "surrogateescape")
            if wanted is None or path in wanted:
                paths.add(path)
    except (IndexError, ValueError, struct.error):
        return None
    return paths


# --- a work tree ----------------------------------------------------------------------------


def _ignore_rules_of(root: Path, git_dir: Path, files: list[str]) -> list[PathRule] | None:
    """info/exclude first, then every .gitignore from the root down (later rules win); None
    when they hold more than MAX_IGNORE_BYTES or MAX_RULES in all (unknown)."""
    ignore_files = sorted((f for f in files if f == ".gitignore" or f.endswith("/.gitignore")),
                          key=lambda f: f.count("/"))
    texts = [((_read_limited(git_dir / "info" / "exclude", MAX_IGNORE_BYTES, git_dir) or b""), "")]
    total, lines = len(texts[0][0]), texts[0][0].count(b"\n")
    for rel in ignore_files:
        # `files` come from a walk that follows no directory link: only the file itself
        # could be one, and _read_limited never opens through a link.
        data = _read_limited(root / rel, MAX_IGNORE_BYTES, None) or b""
        total, lines = total + len(data), lines + data.count(b"\n")
        if total > MAX_IGNORE_BYTES or lines > MAX_RULES + len(texts):
            return None
        texts.append((data, rel[: -len(".gitignore")]))
    rules: list[PathRule] = []
    for data, base in texts:
        rules.extend(ignore_rules(data.decode("utf-8", "replace"), base))
        if len(rules) > MAX_RULES:
            return None
    return rules


class _Ignored:
    """gitignore(5): a path is ignored when it, or any directory above it, is (each directory
    judged once)."""

    def __init__(self, rules: list[PathRule] | RuleSet):
        self.rules = _as_rule_set(rules)
        self.dirs: dict[str, bool] = {}

    def dir_ignored(self, rel_dir: str) -> bool:
        known = self.dirs.get(rel_dir)
        if known is None:
            parent = rel_dir.rpartition("/")[0]
            known = (bool(parent) and self.dir_ignored(parent)) or bool(self.rules.last(rel_dir, is_dir=True))
            self.dirs[rel_dir] = known
        return known

    def __call__(self, rel: str) -> bool:
        parent = rel.rpartition("/")[0]
        return (bool(parent) and self.dir_ignored(parent)) or bool(self.rules.last(rel))


def ignored(rel: str, rules: list[PathRule] | RuleSet) -> bool:
    """gitignore(5): a path is ignored when it, or any directory above it, is."""
    return _Ignored(rules)(rel)


def committable(root: Path, files: list[str]) -> set[str] | None:
    """Of `files` (paths of the work tree at `root`), those a `git add -A` would commit:
    tracked, or untracked and not ignored. None when `root` is not a plain git work tree
    whose index this reader understands, or its ignore rules are more than this reader
    matches within its bounds (MAX_RULES, MAX_MATCHES)."""
    git_dir = root / ".git"
    if git_dir.is_symlink() or not git_dir.is_dir():
        return None
    tracked = tracked_paths(git_dir, set(files))
    if tracked is None:
        return None
    rules = _ignore_rules_of(root, git_dir, files)
    if rules is None:
        return None
    is_ignored = _Ignored(RuleSet(rules, max_matches=MAX_MATCHES))
    try:
        return {rel for rel in files if rel in tracked or not is_ignored(rel)}
    except (TooManyMatches, RecursionError):
        return None


def lfs_filter_configured(root: Path) -> bool:
    """Whether git-lfs's clean filter is set up for this work tree: in its .git/config (read
    as text, never run), or in the user's global configuration (`git lfs install`)."""
    from hfdoctor.bounded.programs import global_git_config

    config = (_read_limited(root / ".git" / "config", MAX_IGNORE_BYTES, root) or b"").decode("utf-8", "replace")
    in_repo, section = False, ""
    for line in config.splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line.strip("[]").replace('"', "").replace(" ", ".").lower()
        elif section == "filter.lfs" and line.replace(" ", "").lower().startswith("clean="):
            in_repo = True
    return in_repo or bool(global_git_config("filter.lfs.clean"))

