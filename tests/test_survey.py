"""hfdoctor.survey: the pure per-target function, in-process pools, and a real Ray run."""

from __future__ import annotations

import json
import sys


from conftest import ROOT, UPSTREAM
from hub_server import FakeHub, HubRepo, folder_files
from hfdoctor.survey import Options, check_many, report_json, rule_counts

OPTIONS = Options(upstream_dirs=(str(UPSTREAM),), select=("TPL001", "CARD001", "TOK"))


def test_report_json_is_plain_data_and_the_same_twice():
    first = report_json(str(UPSTREAM / "Qwen--Qwen3-8B"), OPTIONS)
    assert json.loads(json.dumps(first)) == first == report_json(str(UPSTREAM / "Qwen--Qwen3-8B"), OPTIONS)
    assert report_json("no/such/dir", OPTIONS) == {"hfdoctor": first["hfdoctor"], "target": "no/such/dir",
                                                    "error": "no such directory"}


def test_check_many_in_processes_gives_every_target_once():
    targets = [str(UPSTREAM / name) for name in ("Qwen--Qwen3-8B", "google--gemma-2b-it", "microsoft--phi-4")]
    results = dict(check_many(targets, OPTIONS, jobs=2))
    assert sorted(results) == [0, 1, 2] and [results[i].target for i in range(3)] == targets
    counts = rule_counts(results.values())
    assert counts["eos-not-end-of-turn"].repos == 1  # gemma-2b-it, at that revision


def test_a_ray_survey_runs_the_same_function(tmp_path):
    """examples/survey_ray.py on a local Ray (ray.init in the test), over a directory and a
    repo of a Hub on 127.0.0.1."""
    import ray
    sys.path.insert(0, str(ROOT / "examples"))
    import survey_ray

    hub = FakeHub({"Qwen/Qwen3-8B": HubRepo(folder_files(UPSTREAM / "Qwen--Qwen3-8B"))}).start()
    try:
        ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False,  # one worker: the start is the cost
                 runtime_env={"env_vars": {"HF_ENDPOINT": hub.endpoint, "HF_HUB_OFFLINE": "0"}})
        targets = [str(UPSTREAM / "google--gemma-2b-it"), "Qwen/Qwen3-8B", "acme/missing"]
        reports = survey_ray.survey(targets, OPTIONS)
    finally:
        ray.shutdown()
        hub.stop()
    assert [r["target"] for r in reports] == targets
    assert reports[0] == report_json(targets[0], OPTIONS)  # the same pure function, wherever it runs
    assert reports[1]["revision"]["commit"] == hub.repos["Qwen/Qwen3-8B"].commit
    assert "no such repository" in reports[2]["error"]
