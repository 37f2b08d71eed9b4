"""The precision corpus: every finding hfdoctor makes on real data it did not write, judged.

Targets: every template of tests/corpus/templates (what TRL, axolotl, unsloth and
chujiezheng/chat_templates publish) checked as a template-only repo, and every folder of
../shared/upstream checked as it is. Each finding is matched to a category of
tests/corpus/judgments.json, which says whether findings of that kind are true and why
(reviewed by hand, finding by finding, when the category was written). A finding no
category claims is unjudged: tests/test_precision.py fails on it, so a rule change that
makes new findings on real data gets looked at.

    python tests/corpus/judge.py            # the per-rule table (also bench/precision.py)
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))

from hfdoctor.lint.check import check_target  # noqa: E402
from hfdoctor.knowledge.upstream import Upstream  # noqa: E402


def judgments() -> dict:
    return json.loads((HERE / "judgments.json").read_text(encoding="utf-8"))


def targets(upstream: Path, scratch: Path) -> dict[str, Path]:
    """name -> folder to check: corpus templates as template-only repos, upstream folders as they are."""
    found: dict[str, Path] = {}
    for path in sorted((HERE / "templates").rglob("*.jinja")):
        folder = scratch / f"{path.parent.name}__{path.stem}"
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, folder / "chat_template.jinja")
        found[f"{path.parent.name}/{path.stem}"] = folder
    for folder in sorted(upstream.iterdir()):
        if folder.is_dir() and any(folder.glob("*.json")) | any(folder.glob("*.jinja")):
            found[f"upstream/{folder.name}"] = folder
    return found


def categorize(target: str, rule: str, severity: str, message: str, table: dict) -> str | None:
    """The category of a finding: the first whose rule, severity, targets and pattern all match."""
    for key, category in table["categories"].items():
        severities = category["severity"] if isinstance(category["severity"], list) else [category["severity"]]
        if category["rule"] != rule or severity not in severities:
            continue
        if "targets" in category and not any(re.fullmatch(t, target) for t in category["targets"]):
            continue
        if re.search(category["pattern"], message, re.DOTALL):
            return key
    return None


def run(upstream: Path) -> list[tuple[str, str, str, str, str | None]]:
    """(target, rule, severity, message, category) for every finding."""
    table = judgments()
    up = Upstream((upstream,), use_cache=False, use_hub=False)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for name, folder in targets(upstream, Path(scratch)).items():
            report = check_target(str(folder), upstream=up)
            if report.internal_errors:
                raise SystemExit(f"{name}: {report.internal_errors}")
            for f in report.findings:
                rows.append((name, f.rule, str(f.severity), f.message,
                             categorize(name, f.rule, str(f.severity), f.message, table)))
    return rows


def table_text(rows, n_targets: int) -> str:
    verdicts = {key: c["verdict"] for key, c in judgments()["categories"].items()}
    by_rule: dict[str, Counter] = {}
    fired_on: dict[str, set] = {}
    for target, rule, severity, _, category in rows:
        counts = by_rule.setdefault(rule, Counter())
        counts["findings"] += 1
        counts[verdicts.get(category, "unjudged")] += 1
        counts[severity] += 1
        fired_on.setdefault(rule, set()).add(target)
    lines = [f"{'rule':<28} {'findings':>8} {'true':>5} {'false':>5} {'unjudged':>8} {'targets':>7} "
             f"{'silent on':>9}  (error/warning/info)"]
    for rule, c in sorted(by_rule.items()):
        lines.append(f"{rule:<28} {c['findings']:>8} {c['true']:>5} {c['false']:>5} {c['unjudged']:>8} "
                     f"{len(fired_on[rule]):>7} {n_targets - len(fired_on[rule]):>9}  "
                     f"({c['error']}/{c['warning']}/{c['info']})")
    return "\n".join(lines)


def main() -> None:
    upstream = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT.parent / "shared" / "upstream"
    rows = run(upstream)
    with tempfile.TemporaryDirectory() as scratch:
        n = len(targets(upstream, Path(scratch)))
    print(f"{n} real targets (132 published templates + the ../shared/upstream folders), {len(rows)} findings\n")
    print(table_text(rows, n))
    for target, rule, severity, message, category in rows:
        if category is None:
            print(f"UNJUDGED {target} {rule} {severity}: {message[:200]}")


if __name__ == "__main__":
    main()
