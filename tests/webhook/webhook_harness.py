"""What the webhook tests share: the loopback Hub's repositories, the Hub's documented payloads
(hub_payloads.json, with their provenance), a runner on 127.0.0.1, and a real HTTP client."""

from __future__ import annotations

import copy
import http.client
import json
import time
from pathlib import Path
from urllib.parse import urlsplit

from conftest import ROOT, UPSTREAM
from hub_server import TOKEN, FakeHub, HubRepo, folder_files

SEED = ROOT / "fixtures" / "seed-incident"
PAYLOADS = json.loads((Path(__file__).parent / "hub_payloads.json").read_text())
# The real upstream Qwen3-8B template: seed-incident (a Qwen3-8B fine-tune) with it has no chat template problem.
QWEN3_TEMPLATE = (UPSTREAM / "Qwen--Qwen3-8B" / "chat_template.jinja").read_text()
BROKEN_TEMPLATE = QWEN3_TEMPLATE.replace("{%- endfor %}", "{%- endfor", 1)  # an unclosed tag: does not compile
SECRET = "webhook-test-secret-4c1d"


def seed_files(template: str | None) -> dict[str, bytes]:
    """seed-incident's files, with `template` as tokenizer_config.json's chat_template (None: none, as shipped)."""
    files = {rel: data if isinstance(data, bytes) else data.read_bytes() for rel, data in folder_files(SEED).items()}
    if template is not None:
        config = json.loads(files["tokenizer_config.json"])
        config["chat_template"] = template
        files["tokenizer_config.json"] = json.dumps(config, indent=2).encode()
    return files


def start_hub(repos: dict[str, dict[str, bytes]]) -> FakeHub:
    return FakeHub({repo_id: HubRepo(files) for repo_id, files in repos.items()}).start()


def _named(payload: dict, repo_id: str) -> dict:
    payload = copy.deepcopy(payload)
    payload["repo"]["name"] = repo_id
    payload["repo"]["url"] = {"web": f"https://huggingface.co/{repo_id}", "api": f"https://huggingface.co/api/models/{repo_id}"}
    return payload


def pr_payload(repo_id: str, num: int, action: str = "create", status: str = "open") -> dict:
    """The documented 'Pull Request opened' payload, about pull request `num` of `repo_id`."""
    payload = _named(PAYLOADS["pull_request_opened"], repo_id)
    payload["event"]["action"] = action
    payload["discussion"].update(num=num, status=status)
    payload["discussion"]["url"] = {"web": f"https://huggingface.co/{repo_id}/discussions/{num}",
                                    "api": f"https://huggingface.co/api/models/{repo_id}/discussions/{num}"}
    return payload


def refs_payload(repo_id: str, head_sha: str, refs: list[tuple[str, str | None, str | None]]) -> dict:
    """The documented repo.content payload with these updatedRefs (ref, oldSha, newSha)."""
    payload = _named(PAYLOADS["repo_content_update"], repo_id)
    payload["repo"]["headSha"] = head_sha
    payload["updatedRefs"] = [{"ref": ref, "oldSha": old, "newSha": new} for ref, old, new in refs]
    return payload


def post(url: str, payload: dict | bytes, *, secret: str | None = SECRET, delivery_id: str | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, dict]:
    """POST a delivery as the Hub does; (status, JSON answer)."""
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    sent = {"Content-Type": "application/json", **(headers or {})}
    if secret is not None:
        sent["X-Webhook-Secret"] = secret
    if delivery_id is not None:
        sent["Webhook-Id"] = delivery_id
    status, text = request(url, "POST", "/webhook", body, sent)
    return status, json.loads(text) if text.strip() else {}


def request(url: str, method: str, path: str, body: bytes | None = None, headers: dict | None = None
            ) -> tuple[int, str]:
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


def wait_until(predicate, timeout: float = 180.0) -> bool:
    """Poll a condition (generous: a loaded machine is slow, never a reason to fail)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def settled(service, runs: int, timeout: float = 180.0) -> list:
    """Wait until the runner has `runs` runs and none waits or runs; the runs, oldest first."""
    def done() -> bool:
        history = list(service.runner.history)
        return len(history) >= runs and all(r.state in ("done", "failed", "abandoned") for r in history)

    assert wait_until(done, timeout), [(r.number, r.state, r.verdicts) for r in service.runner.history]
    return list(service.runner.history)


__all__ = ["TOKEN", "SECRET", "seed_files", "start_hub", "pr_payload", "refs_payload", "post", "request",
           "wait_until", "settled", "QWEN3_TEMPLATE", "BROKEN_TEMPLATE"]
