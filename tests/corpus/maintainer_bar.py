"""The maintainer bar: would a model's own maintainer accept each warning and error that
`check` prints on their repository?

Over the ../shared/upstream folders (repositories published by the models' makers), every
warning and error is matched to its judged category (tests/corpus/judgments.json), whose
`maintainer` field says `accept` (a maintainer would take the report and the fix),
`reject` (accurate, but it describes the family's design or is not worth a warning), or
`snapshot` (true only of the partial copy in ../shared/upstream, such as a folder without
the README.md the real repository has: not a finding on the maintainer's repository, so
counted apart). Info findings are not counted: they are printed, never a failed hook.

    python tests/corpus/maintainer_bar.py [UPSTREAM]     # the table, per rule

tests/test_precision.py holds the bar: at least 80% of the counted warnings and errors
accepted, no false error, and the true findings of today pinned one by one.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import judge  # noqa: E402

LOUD = ("warning", "error")


def loud_rows(rows) -> list[tuple[str, str, str, str, str | None, str]]:
    """(target, rule, severity, message, category, maintainer verdict) of each warning and error
    on an upstream folder; the verdict is 'unjudged' when the category has none."""
    categories = judge.judgments()["categories"]
    out = []
    for target, rule, severity, message, category in rows:
        if not target.startswith("upstream/") or severity not in LOUD:
            continue
        verdict = categories.get(category, {}).get("maintainer", "unjudged")
        out.append((target, rule, severity, message, category, verdict))
    return out


def bar(rows) -> dict[str, float | int]:
    """The numbers the bar is held to."""
    loud = loud_rows(rows)
    counts = Counter(verdict for *_, verdict in loud)
    counted = counts["accept"] + counts["reject"] + counts["unjudged"]
    categories = judge.judgments()["categories"]
    false_errors = sum(1 for _, _, severity, _, category, _ in loud
                       if severity == "error" and categories.get(category, {}).get("verdict") != "true")
    return {"loud": len(loud), "counted": counted, "accepted": counts["accept"], "rejected": counts["reject"],
            "unjudged": counts["unjudged"], "snapshot": counts["snapshot"], "false_errors": false_errors,
            "accepted_share": counts["accept"] / counted if counted else 1.0}


def table_text(rows) -> str:
    by_rule: dict[str, Counter] = {}
    for _, rule, severity, _, _, verdict in loud_rows(rows):
        counts = by_rule.setdefault(rule, Counter())
        counts[severity] += 1
        counts[verdict] += 1
    lines = [f"{'rule':<28} {'errors':>6} {'warnings':>8} {'accept':>6} {'reject':>6} {'snapshot':>8} {'unjudged':>8}"]
    for rule, c in sorted(by_rule.items()):
        lines.append(f"{rule:<28} {c['error']:>6} {c['warning']:>8} {c['accept']:>6} {c['reject']:>6} "
                     f"{c['snapshot']:>8} {c['unjudged']:>8}")
    numbers = bar(rows)
    lines.append(f"\n{numbers['loud']} warnings and errors on the upstream folders; {numbers['snapshot']} true only "
                 f"of the partial snapshot; of the other {numbers['counted']}, {numbers['accepted']} accepted "
                 f"({numbers['accepted_share']:.0%}), {numbers['rejected']} rejected, {numbers['unjudged']} unjudged; "
                 f"{numbers['false_errors']} false errors")
    return "\n".join(lines)


def main() -> None:
    upstream = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE.parent.parent.parent / "shared" / "upstream"
    rows = judge.run(upstream)
    print(table_text(rows))
    for target, rule, severity, message, _, verdict in loud_rows(rows):
        print(f"{verdict:<9} {target[len('upstream/'):]:<45} {severity:<7} {rule}: {message[:110]}")


if __name__ == "__main__":
    main()
