"""The runner against the loopback Hub (tests/hub_server.py), through huggingface_hub's real client,
sent the Hub's documented payloads (hub_payloads.json) over real HTTP: one comment per pull request,
updated in place; one discussion for a push that introduces errors; a replay, a retry, a restart,
a burst, a full queue, a Hub that errors or hangs."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from hfdoctor.webhook.comment import PR_MARKER
from hfdoctor.webhook.server import ServeConfig, Service
from hfdoctor.webhook.work import Settings
from hub_server import HubRepo
from webhook_harness import (BROKEN_TEMPLATE, QWEN3_TEMPLATE, SECRET, TOKEN, post, pr_payload, refs_payload,
                             request, seed_files, settled, start_hub)


@pytest.fixture
def hub(monkeypatch, tmp_path):
    server = start_hub({"acme/model": seed_files(QWEN3_TEMPLATE), "acme/untemplated": seed_files(None)})
    monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    yield server
    server.stop()


@pytest.fixture
def runner(hub):
    """start(**ServeConfig fields, settings=Settings(...)) -> a started Service; all stopped after the test."""
    services: list[Service] = []

    def start(settings: Settings | None = None, **config) -> Service:
        config = {"port": 0, "secret": SECRET, "hub_timeout_s": 10.0, "hub_attempts": 3, "hub_backoff_s": 0.05,
                  "grace_s": 60.0, **config}
        service = Service(ServeConfig(**config), settings or Settings(check_timeout_s=60), TOKEN, hub.endpoint)
        services.append(service.start())
        return service

    yield start
    for service in reversed(services):
        service.stop()


def section(comment: str, title: str) -> str:
    """The lines of a comment's section (from its title to the next blank line)."""
    if title not in comment:
        return ""
    return comment.split(title, 1)[1].split("\n\n", 1)[0]


def our_events(hub, repo_id: str, num: int) -> list[dict]:
    events = hub.repos[repo_id].discussions[num - 1]["events"]
    return [e for e in events if e["author"]["name"] == "hfdoctor-test"]


def test_a_pull_request_that_breaks_the_template_gets_one_comment_updated_in_place(hub, runner):
    service = runner()
    num = hub.open_pr("acme/model", seed_files(BROKEN_TEMPLATE), title="Tweak the chat template")
    assert post(service.url, pr_payload("acme/model", num), delivery_id="d-1") == (202, {"status": "queued", "run": 1})
    settled(service, 1)
    [comment] = hub.comments("acme/model", num)
    assert comment.startswith(PR_MARKER) and "this pull request introduces 1 error." in comment
    assert "TPL003 `chat-template-syntax-error` in `tokenizer_config.json`" in section(comment, "**Introduces**")
    assert "**Fixes**" not in comment
    assert "Unchanged: 1 error" in comment and "CARD001" not in section(comment, "**Introduces**")  # there before

    # The Hub retries, the owner replays: the same delivery does nothing.
    assert post(service.url, pr_payload("acme/model", num), delivery_id="d-1") == (202, {"status": "duplicate"})
    # The author repairs the template: a new commit on refs/pr/N.
    old_head = hub.repos["acme/model"].refs[f"refs/pr/{num}"]
    new_head = hub.push_pr("acme/model", num, seed_files(QWEN3_TEMPLATE))
    payload = refs_payload("acme/model", hub.repos["acme/model"].commit, [(f"refs/pr/{num}", old_head, new_head)])
    assert post(service.url, payload, delivery_id="d-2")[0] == 202
    runs = settled(service, 2)
    assert [r.state for r in runs] == ["done", "done"] and "comment updated" in runs[1].verdict
    [comment] = hub.comments("acme/model", num)  # still one, edited
    assert "introduces no error or warning" in comment and "TPL003" not in comment and new_head[:12] in comment
    [event] = our_events(hub, "acme/model", num)
    assert event["data"]["numEdits"] == 1


def test_a_pull_request_that_fixes_a_problem_is_reported_as_a_fix(hub, runner):
    service = runner()
    num = hub.open_pr("acme/untemplated", seed_files(QWEN3_TEMPLATE), title="Add the chat template")
    assert post(service.url, pr_payload("acme/untemplated", num))[0] == 202
    settled(service, 1)
    [comment] = hub.comments("acme/untemplated", num)
    assert "this pull request introduces no error or warning and fixes 1 error." in comment
    assert "TPL001 `missing-chat-template`" in section(comment, "**Fixes**") and "**Introduces**" not in comment


def test_a_wrong_or_missing_secret_gets_401_and_no_call_to_the_hub(hub, runner):
    service = runner()
    num = hub.open_pr("acme/model", seed_files(BROKEN_TEMPLATE))
    calls = len(hub.requests)
    for secret in ("wrong", None, SECRET[:-1], SECRET + "x", ""):
        status, answer = post(service.url, pr_payload("acme/model", num), secret=secret)
        assert status == 401 and SECRET not in str(answer)
    assert post(service.url, b'{"event": 1}')[0] == 400  # the right secret, not a payload
    status, _ = request(service.url, "POST", "/webhook", b"", {"X-Webhook-Secret": SECRET,
                                                               "Content-Length": str(50 * 1024 * 1024)})
    assert status == 413  # answered from the header: nothing read
    assert len(hub.requests) == calls and list(service.runner.history) == []
    assert hub.comments("acme/model", num) == []


def test_after_a_restart_the_comment_is_found_on_the_hub_and_nobody_elses_is_edited(hub, runner):
    num = hub.open_pr("acme/model", seed_files(BROKEN_TEMPLATE))
    first = runner()
    assert post(first.url, pr_payload("acme/model", num))[0] == 202
    settled(first, 1)
    first.stop()
    # Someone quotes the bot's marker; a new runner (nothing in memory) gets the same event again.
    hub.add_comment("acme/model", num, PR_MARKER + " quoting the bot", author="someone-else")
    second = runner()
    assert post(second.url, pr_payload("acme/model", num)) == (202, {"status": "queued", "run": 1})
    [run] = settled(second, 1)
    assert run.state == "done" and run.verdict.endswith("comment unchanged")
    assert len(hub.comments("acme/model", num)) == 1
    assert hub.comments("acme/model", num, author="someone-else") == [PR_MARKER + " quoting the bot"]


def test_a_push_that_introduces_errors_opens_one_discussion_and_a_clean_push_none(hub, runner):
    service = runner()
    repo = hub.repos["acme/model"]
    good = repo.commit
    broken = hub.push("acme/model", seed_files(BROKEN_TEMPLATE))
    assert post(service.url, refs_payload("acme/model", broken, [("refs/heads/main", good, broken)]))[0] == 202
    settled(service, 1)
    [discussion] = repo.discussions
    assert not discussion["isPullRequest"] and discussion["title"] == "hfdoctor: a push to main introduced 1 error"
    body = hub.comments("acme/model", 1)[0]
    assert "TPL003 `chat-template-syntax-error`" in body and "CARD001" not in body
    # Repaired (a clean push: no discussion), then broken the same way again: no second discussion.
    repaired = hub.push("acme/model", seed_files(QWEN3_TEMPLATE))
    again = hub.push("acme/model", seed_files(BROKEN_TEMPLATE))
    post(service.url, refs_payload("acme/model", repaired, [("refs/heads/main", broken, repaired)]))
    post(service.url, refs_payload("acme/model", again, [("refs/heads/main", repaired, again)]))
    runs = settled(service, 3)
    assert "introduces no error or warning and fixes 1 error" in runs[1].verdict
    assert "discussion #1 already says so" in runs[2].verdict
    assert len(repo.discussions) == 1


def test_a_burst_of_50_deliveries_is_handled_without_loss_or_duplicates(hub, runner):
    service = runner(workers=2)
    prs = {hub.open_pr("acme/model", seed_files(BROKEN_TEMPLATE if i % 2 else QWEN3_TEMPLATE)): bool(i % 2)
           for i in range(10)}
    main = hub.repos["acme/model"].commit
    deliveries = []
    for num in prs:
        head = hub.repos["acme/model"].refs[f"refs/pr/{num}"]
        opened, pushed = (pr_payload("acme/model", num), f"open-{num}"), (
            refs_payload("acme/model", main, [(f"refs/pr/{num}", None, head)]), f"ref-{num}")
        renamed = (pr_payload("acme/model", num, action="update"), None)  # no Webhook-Id: known by its content
        deliveries += [opened, pushed, renamed, opened, pushed]  # the last two: the Hub's retries
    assert len(deliveries) == 50
    with ThreadPoolExecutor(max_workers=10) as pool:
        answers = list(pool.map(lambda d: post(service.url, d[0], delivery_id=d[1]), deliveries))
    assert {status for status, _ in answers} == {202}
    assert sorted(a["status"] for _, a in answers).count("queued") == 30
    runs = settled(service, 30)
    assert [r.state for r in runs] == ["done"] * 30
    for num, broken in prs.items():
        [comment] = hub.comments("acme/model", num)
        assert ("TPL003" in section(comment, "**Introduces**")) is broken
    assert service.runner.health()["deliveries"] == {"done": 30, "duplicate": 20, "queued": 30}


def test_a_full_queue_answers_429_at_once(hub, runner):
    service = runner(workers=0, queue_size=2)  # nothing takes work off the queue
    answers = [post(service.url, pr_payload("acme/model", n)) for n in (1, 2, 3)]
    assert [status for status, _ in answers] == [202, 202, 429]
    assert service.runner.health()["queued"] == 2
    assert service.stop(grace_s=5) == {"abandoned": 2, "unfinished": 0}


def test_a_hub_that_hangs_is_cut_off_by_its_deadline(hub, runner):
    hub.repos["acme/hang"] = HubRepo(seed_files(QWEN3_TEMPLATE))  # every request about it hangs
    service = runner(hub_timeout_s=1.0, hub_attempts=2, settings=Settings(check_timeout_s=2))
    post(service.url, pr_payload("acme/hang", 1))
    old, new = "1" * 40, "2" * 40
    post(service.url, refs_payload("acme/hang", new, [("refs/heads/main", old, new)]))
    runs = settled(service, 2)
    assert [r.state for r in runs] == ["failed", "failed"]
    assert "read pull request #1 of acme/hang" in runs[0].verdict and "(2 tries)" in runs[0].verdict
    assert "did not answer within 2 s" in runs[1].verdict
    assert request(service.url, "GET", "/health")[0] == 200
    # One call that hangs on a healthy repository: that delivery fails; replayed, it is done, once.
    hub.hang_ops.add("comment")
    num = hub.open_pr("acme/model", seed_files(BROKEN_TEMPLATE))
    post(service.url, pr_payload("acme/model", num), delivery_id="hung")
    assert settled(service, 3)[2].state == "failed" and hub.comments("acme/model", num) == []
    hub.hang_ops.clear()
    assert post(service.url, pr_payload("acme/model", num), delivery_id="hung")[1]["status"] == "queued"
    assert settled(service, 4)[3].state == "done" and len(hub.comments("acme/model", num)) == 1


def test_hub_errors_are_retried_then_the_work_is_done_once(hub, runner):
    service = runner(hub_attempts=4)
    hub.fail_next.update({"whoami": 1, "details": 2, "comment": 3})
    num = hub.open_pr("acme/model", seed_files(BROKEN_TEMPLATE))
    post(service.url, pr_payload("acme/model", num))
    [run] = settled(service, 1)
    assert run.state == "done" and len(hub.comments("acme/model", num)) == 1
    assert hub.fail_next == {"whoami": 0, "details": 0, "comment": 0}


def test_private_repositories_are_not_named_on_the_status_page(hub, runner):
    hub.repos["acme/secret-model"] = HubRepo(seed_files(QWEN3_TEMPLATE))
    service = runner()
    payload = pr_payload("acme/secret-model", 7)  # no such pull request: the run fails
    payload["repo"]["private"] = True
    post(service.url, payload)
    settled(service, 1)
    status, page = request(service.url, "GET", "/")
    assert status == 200 and "(a private repository)" in page and "secret-model" not in page
    assert "failed (the runner&#x27;s log says why)" in page


def test_fix_prs_opens_one_fix_pull_request_at_a_time(hub, runner):
    service = runner(settings=Settings(check_timeout_s=60, fix_prs=True))
    repo = hub.repos["acme/model"]
    good = repo.commit
    dropped = hub.push("acme/model", seed_files(None))  # the chat template removed: TPL001, with a safe fix
    post(service.url, refs_payload("acme/model", dropped, [("refs/heads/main", good, dropped)]))
    [run] = settled(service, 1)
    assert run.state == "done" and "fix pull request opened" in run.verdict, run.verdicts
    [discussion, pr] = repo.discussions
    assert not discussion["isPullRequest"] and "TPL001" in hub.comments("acme/model", 1)[0]
    assert pr["isPullRequest"] and pr["title"] == "hfdoctor: fix missing-chat-template"
    assert pr["files"] == ["tokenizer_config.json"]
    # Restored, then dropped again while the fix pull request is open: no second one (nor discussion).
    restored = hub.push("acme/model", seed_files(QWEN3_TEMPLATE))
    again = hub.push("acme/model", seed_files(None))
    post(service.url, refs_payload("acme/model", restored, [("refs/heads/main", dropped, restored)]))
    post(service.url, refs_payload("acme/model", again, [("refs/heads/main", restored, again)]))
    runs = settled(service, 3)
    assert "a fix pull request of ours is already open" in runs[2].verdict, runs[2].verdicts
    assert len(repo.discussions) == 2


def test_a_pull_request_that_breaks_its_own_configuration_is_still_commented_on(hub, runner):
    """A repository's own .hfdoctor.toml is untrusted: a pull request that adds an unusable one
    (an unknown key) beside a broken template made the head's check a TargetError, the run
    failed, and the pull request got no comment at all. It is checked without that file, and the
    comment says the file could not be used."""
    service = runner()
    files = {**seed_files(BROKEN_TEMPLATE), ".hfdoctor.toml": b'bogus-key = 1\nignore = ["TPL"]\n'}
    num = hub.open_pr("acme/model", files, title="Tweak the chat template")
    assert post(service.url, pr_payload("acme/model", num))[0] == 202
    [run] = settled(service, 1)
    assert run.state == "done", run.verdict
    [comment] = hub.comments("acme/model", num)
    assert "TPL003 `chat-template-syntax-error`" in section(comment, "**Introduces**")
    said = section(comment, "**Introduces**")
    assert "CFG001 `file-unreadable`" in said and "could not be used" in said and ".hfdoctor.toml: bogus-key" in said
