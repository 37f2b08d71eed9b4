"""`hfdoctor fix`: the minimal, exact, atomic patch.

Three layers, each usable on its own:

- Edit producers that rules call while checking (they compute, never write):
  `json_set_value`, `json_add_to_id_list`, `card_set_base_model`, `missing_template_fix`.
  A JSON edit replaces the bytes of one value or inserts one member, in the file's own
  style (hfdoctor.jsontext); a card edit changes the `base_model` lines of the front
  matter and no other line. Every edit is applied in memory and re-parsed before it is
  offered: if the result is not exactly the intended document, no fix is offered.
- Planning (`plan_fixes`): check, take the fixes of the findings (safe ones unless
  --unsafe-fixes), apply those whose edits do not overlap, and check again on the
  patched text, until nothing more applies (a fix can reveal another finding: a new
  template shows that eos lacks its end-of-turn id). Nothing is written while planning.
- Writing (`write_changes`): every changed file goes to a temporary file in its own
  directory, is fsynced, then renamed over the old one (os.replace) and the directory
  fsynced. A failure part-way puts back the files already replaced. Writes never go
  through a symlink that leaves the repository, never to a weight file.

Exit code of `fix` (CONTRACT.md): 0 when nothing at or above --fail-on is left after
fixing, 1 when something is, 2 when hfdoctor failed (a rule crashed, a write failed).
A fixer that changed files does *not* exit 1 by itself: pre-commit already fails a hook
that modified files, and the contract says fix's 1 means "what is left". With --diff
nothing is written, so what is left is what is on disk: the exit code is check's.
"""

from __future__ import annotations

import copy
import difflib
import json
import os
import re
import stat
import tempfile
from contextlib import suppress
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path, PurePosixPath
from typing import Any

from hfdoctor import jsontext
from hfdoctor.findings import Applicability, Edit, Finding, Fix, Report, Severity
from hfdoctor.registry import Family
from hfdoctor.repo import FRONT_MATTER, WEIGHT_SUFFIXES, ModelRepo

# Files transformers writes with ensure_ascii=False. An all-ASCII file does not show
# which way it was written; for these, new non-ASCII text is written raw, elsewhere
# (config.json, generation_config.json: plain json.dumps) as \u escapes.
UTF8_JSON_FILES = {"tokenizer_config.json", "chat_template.json", "special_tokens_map.json", "added_tokens.json"}
# A fix that keeps revealing new fixes is a bug; stop after this many rounds.
MAX_PASSES = 8


# --- JSON edits ---------------------------------------------------------------------------


def json_set_value(repo: ModelRepo, file: str, pointer: str, value: Any) -> Edit | None:
    """The edit that makes `pointer` in `file` hold `value` (replacing or inserting);
    None when the file is absent or broken, the value is already there, or no exact
    edit can be made."""
    return _json_edit(repo, file, pointer, value, lambda data, style: jsontext.set_value(data, pointer, value, style))


def json_add_to_id_list(repo: ModelRepo, file: str, pointer: str, token_id: int) -> Edit | None:
    """The edit that adds `token_id` to the id list at `pointer` (eos_token_id): an int
    becomes [old, new], a list gains the id at its end. None when it is already there."""
    obj = repo.json(file)
    if obj is None:
        return None
    current = _resolve(obj, jsontext.parse_pointer(pointer))
    if isinstance(current, list):
        wanted: Any = current + [token_id]
    elif isinstance(current, int) and not isinstance(current, bool):
        wanted = [current, token_id]
    else:
        wanted = token_id
    return _json_edit(repo, file, pointer, wanted, lambda d, style: jsontext.add_to_id_list(d, pointer, token_id, style))


_MISSING = object()


def _json_edit(repo: ModelRepo, file: str, pointer: str, wanted: Any, make) -> Edit | None:
    data = repo.raw(file)
    obj = repo.json(file)
    if data is None or obj is None:
        return None
    parts = jsontext.parse_pointer(pointer)
    if _resolve(obj, parts) == wanted:
        return None
    style = jsontext.detect_style(data, ensure_ascii_default=PurePosixPath(file).name not in UTF8_JSON_FILES)
    splice = make(data, style)
    if splice is None:
        return None
    # The patched text must parse to exactly the old document with that one value set.
    try:
        patched = json.loads(splice.apply(data))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    expected = _with_value(obj, parts, wanted)
    if expected is _MISSING or patched != expected:
        return None
    return Edit(file, splice.start, splice.end, splice.text)


def _resolve(obj: Any, parts: list[str]) -> Any:
    for part in parts:
        if isinstance(obj, dict) and part in obj:
            obj = obj[part]
        elif isinstance(obj, list) and part.isdigit() and int(part) < len(obj):
            obj = obj[int(part)]
        else:
            return _MISSING
    return obj


def _with_value(obj: Any, parts: list[str], value: Any) -> Any:
    """A copy of `obj` with `value` at `parts` (parents created); _MISSING if impossible."""
    result = copy.deepcopy(obj)
    node = result
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if isinstance(node, dict):
            if last:
                node[part] = value
            else:
                node = node.setdefault(part, {})
        elif isinstance(node, list) and part == "-" and last:
            node.append(value)
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            if last:
                node[int(part)] = value
            else:
                node = node[int(part)]
        else:
            return _MISSING
    return result


# --- model card ---------------------------------------------------------------------------

_BASE_MODEL_LINE = re.compile(r"^base_model[ \t]*:")
_BLOCK_ITEM = re.compile(r"^(?P<indent>[ \t]*)-(?:[ \t]|$)")


def card_set_base_model(repo: ModelRepo, repo_id: str) -> Edit | None:
    """The edit that sets the card's `base_model` to `repo_id`, keeping its shape (a
    scalar stays a scalar, a flow list `[...]` or block list `- ...` becomes a list of
    one) and every other line byte for byte. Adds the key (or a front matter block)
    when absent. None when the card is absent, already says so, or is too unusual to
    edit line-wise (block scalars, anchors, multi-line items)."""
    text = repo.text("README.md")
    if text is None:
        return None
    newline = "\r\n" if "\r\n" in text else "\n"
    match = FRONT_MATTER.match(text)
    if match is None:
        splice = (0, 0, f"---{newline}base_model: {repo_id}{newline}---{newline}")
    else:
        splice = _base_model_splice(text, match.start(2), match.end(2), repo_id, newline)
    if splice is None:
        return None
    start, end, new = splice
    patched = text[:start] + new + text[end:]
    if patched == text or not _card_says(text, patched, repo_id):
        return None
    return Edit("README.md", len(text[:start].encode("utf-8")), len(text[:end].encode("utf-8")), new)


def _base_model_splice(text: str, block_start: int, block_end: int, repo_id: str, newline: str):
    """(start, end, new text) in `text` for the front matter block [block_start, block_end)."""
    lines: list[tuple[int, str]] = []  # (offset, line with its end of line)
    offset = block_start
    for line in text[block_start:block_end].splitlines(keepends=True):
        lines.append((offset, line))
        offset += len(line)
    key = next((i for i, (_, line) in enumerate(lines) if _BASE_MODEL_LINE.match(line)), None)
    if key is None:
        prefix = newline if block_end > block_start else ""
        return block_end, block_end, f"{prefix}base_model: {repo_id}"
    line_start, line = lines[key]
    body = line.rstrip("\r\n")
    colon = body.index(":") + 1
    value, _comment = _split_comment(body[colon:])
    scalar = value.strip()
    at = line_start + colon + (len(value) - len(value.lstrip()))  # where the value starts
    if scalar:
        if scalar[0] in "{|>&*!" or (scalar[0] == "[" and not scalar.endswith("]")):
            return None  # flow mapping, block scalar, anchor, tag, multi-line flow list
        if scalar[0] == "[":
            return at, at + len(scalar), f"[{repo_id}]"
        if scalar[0] in "\"'":
            return at, at + len(scalar), f"{scalar[0]}{repo_id}{scalar[0]}"
        return at, at + len(scalar), repo_id
    # `base_model:` alone: a block list on the next lines, or null.
    items: list[tuple[int, str]] = []
    for item_start, item in lines[key + 1 :]:
        stripped = item.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if _BLOCK_ITEM.match(item):
            items.append((item_start, item))
        elif item[0] in " \t":
            return None  # a nested mapping or a multi-line item: not a line-wise edit
        else:
            break  # the next key
    if not items:
        end = line_start + len(body)
        return end, end, f" {repo_id}"
    first_start, first = items[0]
    last_start, last = items[-1]
    indent = _BLOCK_ITEM.match(first).group("indent")
    eol = last[len(last.rstrip("\r\n")) :]
    return first_start, last_start + len(last), f"{indent}- {repo_id}{eol}"


def _split_comment(value: str) -> tuple[str, str]:
    """YAML comments start at ' #' outside quotes."""
    quote = None
    for i, ch in enumerate(value):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch == "#" and (i == 0 or value[i - 1] in " \t"):
            return value[:i], value[i:]
    return value, ""


def _card_says(old_text: str, new_text: str, repo_id: str) -> bool:
    """The patched card parses, says base_model repo_id, and every other key is as before."""
    import yaml

    def metadata(text: str) -> dict | None:
        match = FRONT_MATTER.match(text)
        if match is None:
            return {}
        try:
            loaded = yaml.safe_load(match.group(2))
        except yaml.YAMLError:
            return None
        return loaded if isinstance(loaded, dict) else ({} if loaded is None else None)

    old, new = metadata(old_text), metadata(new_text)
    if old is None or new is None or new.get("base_model") not in (repo_id, [repo_id]):
        return False
    return {k: v for k, v in old.items() if k != "base_model"} == {k: v for k, v in new.items() if k != "base_model"}


# --- chat template ------------------------------------------------------------------------


def missing_template_fix(repo: ModelRepo, family: Family) -> tuple[Fix | None, str]:
    """The upstream canonical template of `family`, inserted where this repo keeps
    templates, plus a short note for the finding's message."""
    from hfdoctor.upstream import canonical_template

    lookup = canonical_template(repo.upstream, family)
    pinned = family.template
    if lookup.text is None or pinned is None:
        return None, f"Add the {family.display} template (no automatic fix: {lookup.source})."
    title = f"insert the upstream {pinned.repo} template"
    if pinned.file == "chat_template.jinja" or _keeps_jinja_templates(repo) or not repo.exists("tokenizer_config.json"):
        if repo.exists("chat_template.jinja"):
            return None, f"Add the {pinned.repo} template to chat_template.jinja."
        edit: Edit | None = Edit("chat_template.jinja", 0, 0, lookup.text, create=True)
        title += " as chat_template.jinja"
    else:
        current = (repo.tokenizer_config or {}).get("chat_template")
        if current is not None and not isinstance(current, str):
            return None, f"Add the {pinned.repo} template as the default entry of tokenizer_config.json's chat_template."
        edit = json_set_value(repo, "tokenizer_config.json", "/chat_template", lookup.text)
    if edit is None:
        return None, f"Add the {pinned.repo} template."
    return Fix(title, (edit,), Applicability.SAFE), f"Fix: {title}."


def _keeps_jinja_templates(repo: ModelRepo) -> bool:
    """The repo stores templates as .jinja files (additional_chat_templates/, or a
    template file of another name), so a new default belongs in chat_template.jinja.
    (So does one whose upstream ships chat_template.jinja: see missing_template_fix.)"""
    return any(f.startswith("additional_chat_templates/") or ("/" not in f and f.endswith(".jinja")) for f in repo.files)


# --- applying edits in memory -------------------------------------------------------------


class EditConflict(ValueError):
    """Two edits of one file overlap (or insert at the same point): their order is unknown."""


def apply_edits(data: bytes, edits: list[Edit] | tuple[Edit, ...]) -> bytes:
    """`data` with every edit applied (back to front, so offsets stay valid)."""
    ordered = disjoint(edits)
    for edit in ordered:
        if not 0 <= edit.start <= edit.end <= len(data):
            raise EditConflict(f"edit of {edit.file} at {edit.start}..{edit.end} is outside the file ({len(data)} bytes)")
    for edit in reversed(ordered):
        data = data[: edit.start] + edit.new_text.encode("utf-8") + data[edit.end :]
    return data


def disjoint(edits) -> list[Edit]:
    """The edits of one file in order; EditConflict when two overlap or insert at one point."""
    ordered = sorted(edits, key=lambda e: (e.start, e.end))
    for a, b in zip(ordered, ordered[1:]):
        if b.start < a.end or b.start == a.start:
            raise EditConflict(f"edits of {a.file} overlap at byte {b.start}")
    if any(e.create for e in ordered) and len(ordered) > 1:
        raise EditConflict(f"{ordered[0].file} is created by one edit and edited by another")
    return ordered


class PatchedRepo(ModelRepo):
    """A repo seen as it will be once `changes` are written: reads see the new bytes."""

    def __init__(self, path: str | os.PathLike[str], upstream, changes: dict[str, bytes]):
        super().__init__(path, upstream=upstream)
        self.changes = dict(changes)

    def raw(self, rel: str) -> bytes | None:
        if rel in self.changes:
            return self.changes[rel]
        return super().raw(rel)

    def exists(self, rel: str) -> bool:
        return rel in self.changes or super().exists(rel)

    @cached_property
    def files(self) -> list[str]:
        return sorted(set(ModelRepo.files.func(self)) | set(self.changes))


@dataclass
class Plan:
    """What `fix` will do: the new bytes of each file, and which findings they fix."""

    root: Path
    before: Report
    after: Report  # what `check` will say once `changed` is written
    original: dict[str, bytes | None] = field(default_factory=dict)  # None: the file is new
    changed: dict[str, bytes] = field(default_factory=dict)
    applied: list[Finding] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    internal_errors: list[str] = field(default_factory=list)


def plan_fixes(target: str | os.PathLike[str], *, select=None, ignore=None, upstream=None, unsafe_fixes=False) -> Plan:
    """Check, fix in memory, re-check, until no more fixes apply. Writes nothing."""
    from hfdoctor.check import check_repo
    from hfdoctor.upstream import Upstream

    root = Path(target)
    upstream = upstream if upstream is not None else Upstream.from_options()

    def check(changes: dict[str, bytes]) -> tuple[PatchedRepo, Report]:
        """The patched view and its report: the fixes' offsets are into that view's bytes."""
        repo = PatchedRepo(root, upstream, changes)
        return repo, check_repo(repo, select=select, ignore=ignore, target=str(target))

    original: dict[str, bytes | None] = {}
    changed: dict[str, bytes] = {}
    applied: list[Finding] = []
    refused: list[str] = []
    internal: list[str] = []
    # A fix applied once and offered again did not make its finding go away: not twice.
    done: set[tuple] = set()
    repo, report = check(changed)
    before = report
    for _ in range(MAX_PASSES):
        internal.extend(e for e in report.internal_errors if e not in internal)
        taken: dict[str, list[Edit]] = {}
        for finding in report.findings:
            fix = finding.fix
            if fix is None or (fix.applicability is Applicability.UNSAFE and not unsafe_fixes):
                continue
            key = (finding.code, finding.file, fix.title)
            if key in done:
                continue
            reason = _refusal(root, repo, fix)
            if reason:
                refused.append(f"{finding.code} {finding.rule}: {reason}")
                done.add(key)
                continue
            if _overlaps(taken, fix):
                continue  # offered again next round, computed on the new text
            for edit in fix.edits:
                taken.setdefault(edit.file, []).append(edit)
            applied.append(finding)
            done.add(key)
        if not taken:
            break
        for rel, edits in taken.items():
            if rel not in original:
                original[rel] = repo.raw(rel) if repo.exists(rel) else None
            base = b"" if any(e.create for e in edits) else (repo.raw(rel) or b"")
            changed[rel] = apply_edits(base, edits)
        repo, report = check(changed)  # what is left, and what the new text reveals
    internal.extend(e for e in report.internal_errors if e not in internal)
    changed = {rel: data for rel, data in changed.items() if data != original.get(rel)}
    return Plan(root, before, report, {rel: original[rel] for rel in changed}, changed, applied, refused, internal)


def _refusal(root: Path, repo: ModelRepo, fix: Fix) -> str | None:
    """Why this fix must not be applied, or None."""
    for edit in fix.edits:
        try:
            writable_path(root, edit.file)
        except UnsafeWrite as err:
            return str(err)
        if edit.create and repo.exists(edit.file):
            return f"{edit.file} already exists (the fix would create it)"
        if not edit.create and repo.raw(edit.file) is None:
            return f"{edit.file} cannot be read"
    return None


def _overlaps(taken: dict[str, list[Edit]], fix: Fix) -> bool:
    """Whether `fix` collides with edits already taken this round."""
    for rel in {edit.file for edit in fix.edits}:
        try:
            disjoint(taken.get(rel, []) + [edit for edit in fix.edits if edit.file == rel])
        except EditConflict:
            return True
    return False


def unified_diff(plan: Plan) -> str:
    """A unified diff (a/ b/ prefixes, applies with `git apply` or `patch -p1`)."""
    out: list[str] = []
    for rel in sorted(plan.changed):
        old = plan.original[rel]
        before = _lines(old.decode("utf-8", errors="replace")) if old is not None else []
        after = _lines(plan.changed[rel].decode("utf-8", errors="replace"))
        for line in difflib.unified_diff(before, after, "/dev/null" if old is None else f"a/{rel}", f"b/{rel}"):
            out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def _lines(text: str) -> list[str]:
    """Lines split on \\n only (str.splitlines also splits on \\r, U+2028...)."""
    return re.findall(r"[^\n]*\n|[^\n]+", text)


# --- writing ---------------------------------------------------------------------------------


class UnsafeWrite(Exception):
    """A write hfdoctor refuses to make (outside the repo, through a symlink, a weight file)."""


def writable_path(root: Path, rel: str) -> Path:
    """The real path to write `rel` to; raises UnsafeWrite when it must not be written."""
    parts = PurePosixPath(rel)
    if parts.is_absolute() or ".." in parts.parts or not parts.parts:
        raise UnsafeWrite(f"{rel} is not a path inside the repository")
    if rel.endswith(WEIGHT_SUFFIXES):
        raise UnsafeWrite(f"{rel} is a weight file; hfdoctor never edits weights")
    real_root = root.resolve()
    real = (root / rel).resolve()
    if not real.is_relative_to(real_root):
        raise UnsafeWrite(f"{rel} resolves to {real}, outside the repository (a symlink); not written")
    if real.is_dir():
        raise UnsafeWrite(f"{rel} is a directory")
    return real


def write_changes(plan: Plan) -> None:
    """Write every changed file atomically; on failure, put back those already written.

    Each file is at every moment either its old or its new content, never partial. A
    crash between two renames can leave some files new and others old; a temporary
    `.NAME.*.hfdoctor.tmp` may then remain beside them.
    """
    targets = {rel: writable_path(plan.root, rel) for rel in sorted(plan.changed)}
    for rel, real in targets.items():
        now = real.read_bytes() if real.exists() else None
        if now != plan.original[rel]:
            raise OSError(f"{rel} changed on disk while hfdoctor was fixing; nothing written")
    staged: dict[str, str] = {}
    replaced: list[str] = []
    try:
        for rel, real in targets.items():
            try:
                staged[rel] = _stage(real, plan.changed[rel])
            except OSError as err:  # name the file, not the temporary one beside it
                raise OSError(f"cannot write {rel}: {err.strerror or err}") from err
        for rel, real in targets.items():
            os.replace(staged[rel], real)
            del staged[rel]
            replaced.append(rel)
            _fsync_dir(real.parent)
    except BaseException:
        for rel in reversed(replaced):
            _restore(targets[rel], plan.original[rel])
        raise
    finally:
        for tmp in staged.values():
            with suppress(OSError):
                os.unlink(tmp)


def _stage(real: Path, data: bytes) -> str:
    """Write `data` to a synced temporary file beside `real`, with `real`'s mode and owner."""
    old = real.stat() if real.exists() else None
    fd, tmp = tempfile.mkstemp(prefix=f".{real.name}.", suffix=".hfdoctor.tmp", dir=real.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, stat.S_IMODE(old.st_mode) if old else _new_file_mode())
        if old is not None and hasattr(os, "chown"):
            with suppress(OSError):  # only root may give a file away; others keep their own
                os.chown(tmp, old.st_uid, old.st_gid)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise
    return tmp


def _restore(real: Path, data: bytes | None) -> None:
    with suppress(OSError):
        if data is None:
            real.unlink()
        else:
            os.replace(_stage(real, data), real)
        _fsync_dir(real.parent)


def _new_file_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _fsync_dir(directory: Path) -> None:
    """Make a rename durable. Not every platform can open a directory (Windows)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# --- the command -----------------------------------------------------------------------------


def run_fix(
    target: str,
    *,
    diff: bool,
    unsafe_fixes: bool,
    select: list[str] | None,
    ignore: list[str] | None,
    upstream,
    fail_on: Severity,
    output_format: str,
    console,
) -> int:
    """`hfdoctor fix TARGET`: plan, then print the diff or write, then report what is left."""
    from rich.console import Console

    plan = plan_fixes(target, select=select, ignore=ignore, upstream=upstream, unsafe_fixes=unsafe_fixes)
    errors = list(plan.internal_errors)
    written = False
    # plan.after was checked on exactly the bytes that write_changes puts on disk.
    after = plan.after
    if diff:
        left = plan.before  # nothing is written: what is left is what is on disk
    else:
        if plan.changed:
            try:
                write_changes(plan)
                written = True
            except (OSError, UnsafeWrite) as err:
                errors.append(f"nothing written: {err}")
                after = plan.before
        left = after
    after.target = str(target)
    if output_format == "json":
        _print_json(plan, after, diff, written, errors)
    else:
        summary_console = Console(stderr=True, highlight=False, soft_wrap=True) if diff else console
        if diff:
            console.file.write(unified_diff(plan))
            console.file.flush()
        _print_text(plan, after, diff, written, errors, summary_console)
    if errors:
        return 2
    worst = left.worst()
    return 1 if worst is not None and worst >= fail_on else 0


def _fix_entry(finding: Finding) -> dict[str, Any]:
    assert finding.fix is not None
    return {"code": finding.code, "rule": finding.rule, "file": finding.file, **finding.fix.to_json()}


def _print_json(plan: Plan, after: Report, diff: bool, written: bool, errors: list[str]) -> None:
    from hfdoctor.report.json_report import report_to_json

    out = report_to_json(after)
    out["fixes"] = {
        "applied" if written else "planned": [_fix_entry(f) for f in plan.applied],
        "refused": plan.refused,
        "files": sorted(plan.changed),
        "written": written,
    }
    if diff:
        out["diff"] = unified_diff(plan)
    if errors:
        out["internal_errors"] = errors
    print(json.dumps(out, indent=2, ensure_ascii=False))


def _print_text(plan: Plan, after: Report, diff: bool, written: bool, errors: list[str], console) -> None:
    from rich.markup import escape

    from hfdoctor.report.text import write_text

    verb = "would fix" if diff or not written else "fixed"
    if plan.applied and plan.changed:
        files = ", ".join(sorted(plan.changed))
        console.print(f"[bold]{escape(after.target)}[/bold]: {verb} {len(plan.applied)} finding(s) in {escape(files)}"
                      + ("; nothing written (--diff)" if diff else ""))
        for finding in plan.applied:
            assert finding.fix is not None
            console.print(f"  [green]{verb}[/green] {finding.code} [dim]{finding.rule}[/dim] "
                          f"{escape(finding.file or '')}: {escape(finding.fix.title)}", soft_wrap=True)
    else:
        console.print(f"[bold]{escape(after.target)}[/bold]: nothing to fix")
    for reason in plan.refused:
        console.print(f"  [yellow]not fixed[/yellow] {escape(reason)}", soft_wrap=True)
    for err in errors:
        console.print(f"[bold red]error:[/bold red] {escape(err)}", soft_wrap=True)
    unsafe = [f for f in after.findings if f.fix is not None and f.fix.applicability is Applicability.UNSAFE]
    if unsafe:
        console.print(f"  {len(unsafe)} more fix(es) available with --unsafe-fixes")
    if diff:
        console.print("left after applying this diff:")
    else:
        console.print("left after fixing:" if written or not plan.changed else "left (nothing was written):")
    write_text([after], console)
