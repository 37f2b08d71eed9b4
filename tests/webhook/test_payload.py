"""The Hub's documented payloads (hub_payloads.json, with their provenance) read into tasks; anything
else is ignored or malformed, never a crash; a delivery's key makes a retry or replay a duplicate."""

from __future__ import annotations

import json

import pytest

from hfdoctor.webhook.payload import MalformedPayload, delivery_id_of, read_delivery
from webhook_harness import PAYLOADS, pr_payload, refs_payload

OLD, NEW, PR_HEAD = "ce9a4674fa833a68d5a73ec355f0ea95eedd60b7", "575db8b7a51b6f85eb06eee540738584589f131c", "a" * 40


def read(payload, delivery_id=None):
    return read_delivery(json.dumps(payload).encode(), delivery_id)


def test_the_documented_pull_request_payload_is_a_pull_request_task():
    delivery = read(PAYLOADS["pull_request_opened"])
    [task] = delivery.tasks
    assert (task.kind, task.repo_id, task.pr_num, task.base_ref) == (
        "pull-request", "openai-community/gpt2", 19, "refs/heads/main")
    assert delivery.private is False and delivery.ignored == ""


def test_the_documented_content_payload_is_a_push_to_main_and_its_tag_is_ignored():
    delivery = read(PAYLOADS["repo_content_update"])
    [task] = delivery.tasks  # refs/tags/test: not a branch anyone checks
    assert (task.kind, task.repo_id, task.old_sha, task.new_sha) == ("push", "some-user/some-repo", OLD, NEW)


def test_new_commits_on_a_pull_request_ref_recheck_it():
    [task] = read(refs_payload("acme/model", NEW, [("refs/pr/7", None, PR_HEAD)])).tasks
    assert (task.kind, task.pr_num) == ("pull-request", 7)


@pytest.mark.parametrize("payload, why", [
    (pr_payload("acme/model", 3, status="merged"), "not an open pull request"),
    (pr_payload("acme/model", 3, action="delete"), "not an open pull request"),
    (refs_payload("acme/model", NEW, [("refs/heads/main", None, NEW)]), "no new commit"),  # a new repository
    (refs_payload("acme/model", NEW, [("refs/heads/dev", OLD, NEW)]), "no new commit"),
    (refs_payload("acme/model", NEW, [("refs/heads/main", OLD, None)]), "no new commit"),  # main deleted
    ({**PAYLOADS["pull_request_opened"], "event": {"action": "create", "scope": "discussion.comment"}}, "scope"),
    ({**PAYLOADS["repo_content_update"], "event": {"action": "update", "scope": "repo.config"}}, "scope"),
])
def test_what_the_runner_does_not_act_on_is_ignored_with_a_reason(payload, why):
    delivery = read(payload)
    assert delivery.tasks == () and why in delivery.ignored


def test_a_dataset_or_space_is_ignored():
    payload = pr_payload("acme/data", 1)
    payload["repo"]["type"] = "dataset"
    assert "model repositories" in read(payload).ignored


@pytest.mark.parametrize("body", [
    b"not json", b"[]", b"\xff\xfe", b'{"event": {}}', json.dumps({"event": {"scope": "repo", "action": "x"}}).encode(),
    json.dumps({**PAYLOADS["pull_request_opened"], "repo": {**PAYLOADS["pull_request_opened"]["repo"],
                                                            "name": "../../etc/passwd"}}).encode(),
    json.dumps({**PAYLOADS["pull_request_opened"], "discussion": {**PAYLOADS["pull_request_opened"]["discussion"],
                                                                  "num": "19"}}).encode(),
    json.dumps(refs_payload("acme/model", NEW, [("refs/heads/main", "HEAD~1", NEW)])).encode(),
    b"[" * 100_000,
])
def test_what_is_not_a_hub_payload_is_malformed(body):
    with pytest.raises(MalformedPayload):
        read_delivery(body)


def test_a_delivery_is_known_by_its_webhook_id_or_else_by_what_happened():
    payload = PAYLOADS["pull_request_opened"]
    assert read(payload, "d-1").key == read(pr_payload("other/repo", 2), "d-1").key == "id:d-1"
    assert read(payload).key == read(json.loads(json.dumps(payload))).key  # a replay without an id
    assert read(payload).key != read(pr_payload("openai-community/gpt2", 19, action="update")).key
    assert delivery_id_of(" abc ") == "abc"
    assert delivery_id_of("x" * 500) is None and delivery_id_of("a\nb") is None and delivery_id_of("") is None
