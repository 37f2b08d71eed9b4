"""What inert output means, shared by the tests that hold each writer to it (report, fix --pr, webhook):
no raw control, bidi or separator character, no line GitHub's runner reads as a workflow command, and Markdown
with no HTML or link, outside text only in code spans."""

from __future__ import annotations

import re

from markdown_it import MarkdownIt

from hfdoctor.report import inert

# What no output may hold raw: C0 controls but LF, DEL, C1, bidi, line separators, lone surrogates.
RAW = set(map(chr, [*range(0x0A), *range(0x0B, 0x20), *range(0x7F, 0xA0), *inert.BIDI, *inert.SEPARATORS,
                    *range(0xD800, 0xE000)]))


def assert_inert(out: str) -> None:
    for line in out.split("\n"):
        assert not inert.is_workflow_command(line), line
        assert not RAW & set(line), (sorted(RAW & set(line)), line)


def runner_commands(output: str) -> list[str]:
    """The workflow commands GitHub's runner would run on this output: it reads lines split at CR
    and LF, and between `::stop-commands::T` and a command named T (any case) runs none."""
    commands, stop = [], None
    for raw in re.split(r"\r\n|\r|\n", output):
        text = raw.lstrip()
        if not text.startswith("::"):
            continue
        name = text[2:].split("::", 1)[0].split(" ", 1)[0]
        if stop is not None:
            if name.lower() == stop.lower():
                stop = None
            continue
        commands.append(name)
        if name == "stop-commands":
            stop = text.split("::", 2)[2]
    return commands


MARKDOWN = MarkdownIt("gfm-like", {"html": True}).disable("linkify")  # linkify is checked as text below


def assert_markdown_inert(markdown: str, also: tuple[str, ...] = ()) -> list[str]:
    """No HTML, no links, and outside text only in code spans (nor any of `also`, such as "@" for a mention,
    outside them); the code spans' contents."""
    codes = []
    for token in MARKDOWN.parse(markdown):
        assert token.type != "html_block", token
        for child in token.children or []:
            assert child.type not in ("html_inline", "link_open", "image"), child
            if child.type == "code_inline":
                codes.append(child.content)
            elif child.type == "text":
                assert not any(s in child.content for s in ("www.", "http", "<", "::", "##[", *also)), child.content
    return codes
