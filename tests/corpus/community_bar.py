"""The community bar: would the people who publish fine-tunes, adapters, merges and quantized copies
accept each warning and error that `check` prints on their folders?

Every folder of tests/corpus/community (model folders people committed to public GitHub repositories,
see community_load.py) is checked as a new user would: no --upstream, no Hugging Face cache, no Hub.
Each warning and error is matched to the first judgment of tests/corpus/community_judgments.json whose
rule, severity, folders (regexes over the slug, when given), left_out (a regex that one of the files
the stored copy left out must match, when given) and message pattern match. Verdicts:

  true       a real problem the publisher would fix;
  by-design  accurate, but it describes the family's own upstream design (not the publisher's doing);
  false      wrong: the folder is fine in that respect;
  snapshot   true only of the stored copy (the weights, code or a 4 MiB+ file are left out of it).

The table per rule counts them, with each rule's precision (the share of its warnings and errors judged
true, snapshot-only aside); "errors true" is the share of errors (snapshot-only aside) judged true,
"accepted" the share of warnings and errors (snapshot-only and card-metadata aside) judged true. A rule
whose loud findings are under PRECISION_FLOOR true does not stay loud (tests/test_community.py holds it).
The folders listed under "held_out" in the judgments file were never tuned on: their figures are also
printed apart (--held-out prints only them).

    python tests/corpus/community_bar.py            # the table, then every warning and error judged
    python tests/corpus/community_bar.py --unjudged # only the findings no judgment claims
    python tests/corpus/community_bar.py --pin      # rewrite the pins tests/test_community.py holds
    python tests/corpus/community_bar.py --held-out # only the held-out folders

The pins (in community_judgments.json) are the findings of the day the corpus was judged, one per
(folder, rule, judgment): tests/test_community.py requires each true one to still fire and each false
one to be gone.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import community_load  # noqa: E402
from hfdoctor.lint.check import check_target  # noqa: E402
from hfdoctor.knowledge.upstream import Upstream  # noqa: E402

LOUD = ("warning", "error")
VERDICTS = ("true", "by-design", "false", "snapshot")
CARD_METADATA = "card-metadata"
JUDGMENTS = HERE / "community_judgments.json"
PRECISION_FLOOR = 0.8

Row = tuple[str, str, str, str, "str | None"]  # slug, rule, severity, message, judgment key


def judgments() -> dict[str, dict]:
    return json.loads(JUDGMENTS.read_text(encoding="utf-8"))["judgments"]


def held_out() -> list[str]:
    """The folders never tuned on (community_judgments.json's held_out)."""
    return json.loads(JUDGMENTS.read_text(encoding="utf-8")).get("held_out", [])


def judge(slug: str, rule: str, severity: str, message: str, table: dict[str, dict]) -> str | None:
    """The key of the first judgment that claims this finding, or None."""
    for key, j in table.items():
        severities = j["severity"] if isinstance(j["severity"], list) else [j["severity"]]
        if j["rule"] != rule or severity not in severities:
            continue
        if "folders" in j and not any(re.fullmatch(f, slug) for f in j["folders"]):
            continue
        if "left_out" in j and not any(re.search(j["left_out"], name) for name in _left_out(slug)):
            continue
        if re.search(j["pattern"], message, re.DOTALL):
            return key
    return None


def _left_out(slug: str) -> list[str]:
    path = community_load.COMMUNITY / slug / "folder.json"
    return list(community_load.folder_info(slug).get("left_out", {})) if path.is_file() else []


def check_folders(folders: dict[str, Path], fixes: list[tuple[str, str, str | None]] | None = None) -> list[Row]:
    """Every warning and error on the folders, judged. Info findings are not counted (never a failed hook).
    `fixes`, when given, gets (slug, code, the fix's applicability or None) for every finding, info included."""
    table = judgments()
    up = Upstream((), use_cache=False, use_hub=False)
    rows: list[Row] = []
    for slug, folder in sorted(folders.items()):
        report = check_target(str(folder), upstream=up)
        if report.internal_errors:
            raise SystemExit(f"{slug}: {report.internal_errors}")
        for f in report.findings:
            if fixes is not None:
                fixes.append((slug, f.code, str(f.fix.applicability) if f.fix else None))
            severity = str(f.severity)
            if severity in LOUD:
                rows.append((slug, f.rule, severity, f.message, judge(slug, f.rule, severity, f.message, table)))
    return rows


def run(only: list[str] | None = None, fixes: list[tuple[str, str, str | None]] | None = None) -> list[Row]:
    with tempfile.TemporaryDirectory() as scratch:
        return check_folders(community_load.materialise(Path(scratch), only), fixes)


def verdict_of(key: str | None, table: dict[str, dict]) -> str:
    return table[key]["verdict"] if key in table else "unjudged"


def bar(rows: list[Row]) -> dict[str, float | int]:
    """The numbers the bar is held to."""
    table = judgments()
    errors = [verdict_of(k, table) for _, _, s, _, k in rows if s == "error"]
    errors = [v for v in errors if v != "snapshot"]
    counted = [verdict_of(k, table) for _, r, _, _, k in rows if r != CARD_METADATA]
    counted = [v for v in counted if v != "snapshot"]
    return {"loud": len(rows), "errors": len(errors), "errors_true": errors.count("true"),
            "errors_true_share": errors.count("true") / len(errors) if errors else 1.0,
            "counted": len(counted), "accepted": counted.count("true"),
            "accepted_share": counted.count("true") / len(counted) if counted else 1.0,
            "unjudged": sum(1 for *_, k in rows if k not in table)}


def rule_precision(rows: list[Row]) -> dict[str, tuple[int, int]]:
    """rule -> (loud findings judged true, loud findings judged), snapshot-only aside."""
    table = judgments()
    found: dict[str, list[int]] = {}
    for _, rule, _, _, key in rows:
        verdict = verdict_of(key, table)
        if verdict in ("snapshot", "unjudged"):
            continue
        counts = found.setdefault(rule, [0, 0])
        counts[0] += verdict == "true"
        counts[1] += 1
    return {rule: (t, n) for rule, (t, n) in found.items()}


def table_text(rows: list[Row], n_folders: int) -> str:
    table = judgments()
    by_rule: dict[str, Counter] = {}
    for slug, rule, severity, _, key in rows:
        counts = by_rule.setdefault(rule, Counter())
        counts[severity] += 1
        counts[verdict_of(key, table)] += 1
        counts["folders:" + slug] = 1
    header = (f"{'rule':<28} {'errors':>6} {'warnings':>8} {'true':>5} {'by-design':>9} {'false':>5} "
              f"{'snapshot':>8} {'unjudged':>8} {'folders':>7} {'precision':>9}")
    lines = [header]
    total = Counter()
    precision = rule_precision(rows)
    for rule, c in sorted(by_rule.items()):
        folders = sum(1 for k in c if k.startswith("folders:"))
        t, n = precision.get(rule, (0, 0))
        share = f"{t / n:.0%}" if n else "-"
        lines.append(f"{rule:<28} {c['error']:>6} {c['warning']:>8} {c['true']:>5} {c['by-design']:>9} "
                     f"{c['false']:>5} {c['snapshot']:>8} {c['unjudged']:>8} {folders:>7} {share:>9}")
        total.update({k: v for k, v in c.items() if not k.startswith("folders:")})
    lines.append(f"{'all':<28} {total['error']:>6} {total['warning']:>8} {total['true']:>5} {total['by-design']:>9} "
                 f"{total['false']:>5} {total['snapshot']:>8} {total['unjudged']:>8}")
    n = bar(rows)
    lines.append(f"\n{n_folders} community folders, {n['loud']} warnings and errors.")
    lines.append(f"errors true: {n['errors_true']} of {n['errors']} ({n['errors_true_share']:.0%}, snapshot-only aside)")
    lines.append(f"accepted: {n['accepted']} of {n['counted']} warnings and errors ({n['accepted_share']:.0%}, "
                 f"snapshot-only and {CARD_METADATA} aside); {n['unjudged']} unjudged")
    under = sorted(r for r, (t, k) in precision.items() if k and t / k < PRECISION_FLOOR)
    lines.append(f"rules under {PRECISION_FLOOR:.0%} true: {', '.join(under) or 'none'}")
    return "\n".join(lines)


def pins(rows: list[Row]) -> dict[str, list[list[str]]]:
    """[folder, rule, judgment] of each true and each false finding, once each, sorted."""
    table = judgments()
    found: dict[str, set] = {"true": set(), "false": set()}
    for slug, rule, _, _, key in rows:
        verdict = verdict_of(key, table)
        if verdict in found:
            found[verdict].add((slug, rule, key))
    return {verdict: [list(p) for p in sorted(found[verdict])] for verdict in ("true", "false")}


def write_pins(rows: list[Row]) -> None:
    """Rewrite the true pins from today's findings; the false pins are kept and added to: a false
    finding that a fix made disappear must stay pinned, or nothing holds that it stays gone."""
    data = json.loads(JUDGMENTS.read_text(encoding="utf-8"))
    found = pins(rows)
    kept = {tuple(p) for p in data.get("pins", {}).get("false", [])}
    found["false"] = [list(p) for p in sorted(kept | {tuple(p) for p in found["false"]})]
    data["pins"] = found
    JUDGMENTS.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def main() -> None:
    only_unjudged = "--unjudged" in sys.argv[1:]
    slugs = [a for a in sys.argv[1:] if not a.startswith("--")] or (held_out() if "--held-out" in sys.argv[1:] else None)
    rows = run(slugs)
    if "--pin" in sys.argv[1:]:
        write_pins(rows)
    table = judgments()
    if not only_unjudged:
        print(table_text(rows, len(slugs or community_load.slugs())))
        kept = set(held_out())
        if slugs is None and kept:
            print(f"\nheld-out folders (never tuned on), {len(kept)} of them:")
            print("\n".join(table_text([r for r in rows if r[0] in kept], len(kept)).splitlines()[-5:]))
        print()
    for slug, rule, severity, message, key in rows:
        verdict = verdict_of(key, table)
        if only_unjudged and verdict != "unjudged":
            continue
        print(f"{verdict:<9} {slug[:60]:<60} {severity:<7} {rule}: {' '.join(message.split())[:400]}")


if __name__ == "__main__":
    main()
