"""Check a catalog of model repositories on a Ray cluster with hfdoctor.survey.

`hfdoctor.survey.report_json(target, options)` is a pure function of a target (a Hub repo
id, a path every worker can read, ...) and the options: it writes nothing and shares no
state, so Ray can map it over any number of repositories, on one machine or a cluster.

    pip install hfdoctor ray
    python examples/survey_ray.py targets.txt > reports.jsonl   # one report a line
    RAY_ADDRESS=auto python examples/survey_ray.py targets.txt   # on a running cluster

Each worker needs the Hub endpoint and token in its environment (HF_ENDPOINT, HF_TOKEN)
if the repos are gated or private; pass them with `ray.init(runtime_env={"env_vars": ...})`.
"""

from __future__ import annotations

import json
import sys
from collections import Counter

import ray

from hfdoctor.survey import Options, report_json


def survey(targets: list[str], options: Options | None = None, num_cpus: int | None = None) -> list[dict]:
    """Reports of every target, in the order given (errors are {"target", "error"} objects)."""
    if not ray.is_initialized():
        ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    remote = ray.remote(report_json)
    return ray.get([remote.remote(target, options or Options()) for target in targets])


def main() -> None:
    targets = [line.strip() for line in open(sys.argv[1]) if line.strip() and not line.startswith("#")]
    reports = survey(targets)
    for report in reports:
        print(json.dumps(report, ensure_ascii=False))
    fired = Counter(rule for r in reports for rule in {f["rule"] for f in r.get("findings", [])})
    for rule, repos in fired.most_common():
        print(f"{rule:<30} {repos} repo(s)", file=sys.stderr)


if __name__ == "__main__":
    main()
