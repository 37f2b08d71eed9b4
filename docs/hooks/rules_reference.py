"""MkDocs hook: the rules reference, generated from each rule's own metadata and docstring at build time
(as ruff's rule pages are), so the site can never disagree with `hfdoctor explain`.

One page per rule at `rules/<name>/` (each rule's helpUri in SARIF) and an index table at `rules/`.
"""

from __future__ import annotations

import html
import re

from mkdocs.structure.files import File

from hfdoctor.lint.rules import ALL_RULES, find_rule, split_codes
from hfdoctor.lint.rules.base import Rule

# The paragraphs every rule doc has (hfdoctor/lint/rules/base.py): each becomes a heading.
SECTIONS = ("Why", "How it is decided", "Example", "Severity", "Fix")
SECTION = re.compile(r"^(%s):\s*" % "|".join(re.escape(s) for s in SECTIONS))


def inert_markdown(text: str) -> str:
    """Docs quote markers such as <think> and <|im_end|> outside code spans too: escape HTML there, so
    Markdown prints them instead of swallowing them as tags. Code spans are kept as they are."""
    parts = re.split(r"(`[^`]*`)", text)
    return "".join(part if part.startswith("`") and part.endswith("`") and len(part) > 1
                   else html.escape(part, quote=False) for part in parts)


def rule_page(r: Rule) -> str:
    paragraphs = r.doc.split("\n\n")
    lines = [f"# {r.name} ({r.code})", "",
             f"Default severity: **{r.severity}** · fix: **{r.fix}**"
             + (f" · also selected by: {', '.join(f'`{a}`' for a in r.aliases)}" if r.aliases else ""), "",
             inert_markdown(paragraphs[0].replace("\n", " ")), ""]
    for paragraph in paragraphs[1:]:
        flowed = paragraph.replace("\n", " ")
        heading = SECTION.match(flowed)
        if heading:
            body = flowed[heading.end():]
            lines += [f"## {heading.group(1)}", "", inert_markdown(body[:1].upper() + body[1:]), ""]
        else:
            lines += [inert_markdown(flowed), ""]
    lines += ["## Select or ignore it", "", "```bash",
              f"hfdoctor check . --select {r.code}      # only this rule",
              f"hfdoctor check . --ignore {r.name}      # every rule but this one", f"hfdoctor explain {r.code}", "```",
              ""]
    return "\n".join(lines)


def index_page() -> str:
    lines = ["# Rules", "",
             "Every rule hfdoctor has, generated from the rules themselves (`hfdoctor rules` prints the same list, "
             "`hfdoctor explain CODE` one rule's page). The severity is each rule's default: a rule states a finding "
             "louder or quieter when its own evidence says so, and `--fail-on` decides what fails. The fix column "
             "says which fixes a rule's findings carry: `none`; `safe` (`hfdoctor fix` applies them); `unsafe` "
             "(only with `--unsafe-fixes`); `sometimes` (safe or unsafe, as the evidence decides).", "",
             "| code | name | default severity | fix | what it flags |", "|---|---|---|---|---|"]
    for r in ALL_RULES:
        lines.append(f"| [{r.code}]({r.name}.md) | `{r.name}` | {r.severity} | {r.fix} | "
                     f"{inert_markdown(r.summary).replace('|', chr(92) + '|')} |")
    lines += ["", "## Old codes", "",
              "Codes that were split into one code per kind stay aliases: `--select`, `--ignore` and `explain` "
              "take them, and they stand for every rule split from them.", ""]
    for old, rules in split_codes().items():
        was = find_rule(old)
        lines.append(f"- `{old}`" + (f" (`{was.name}`)" if was is not None else "") + ": "
                     + ", ".join(f"[{r.code}]({r.name}.md) `{r.name}`" for r in rules))
    return "\n".join(lines) + "\n"


def on_files(files, config):
    files.append(File.generated(config, "rules/index.md", content=index_page()))
    for r in ALL_RULES:
        files.append(File.generated(config, f"rules/{r.name}.md", content=rule_page(r)))
    return files
