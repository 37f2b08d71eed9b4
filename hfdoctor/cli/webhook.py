"""`hfdoctor webhook serve`: the command line of the Hub webhook runner (hfdoctor.webhook)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Callable

from hfdoctor.cli.common import SEVERITIES, UPSTREAM_HELP, check_selectors, fail, split_list
from hfdoctor.cli.parsers import at_least, choice, new_parser, rule_filters

SECRET_ENV = "HFDOCTOR_WEBHOOK_SECRET"


def webhook_serve(args: argparse.Namespace) -> int:
    """Serve the Hub webhook runner: check every pull request and every push to main of the
    repositories a Hub webhook watches, and say what each change introduced and fixed.

    Register the webhook (https://huggingface.co/settings/webhooks) with this server's URL
    followed by /webhook, the secret given here, and the repo and discussion events. A pull
    request gets one comment, updated in place when it changes; a push to main that introduces
    errors (--fail-on) opens one discussion. The Hub token (HF_TOKEN, or `hf auth login`)
    must be allowed to write discussions on the watched repositories; it is never printed."""
    from huggingface_hub import get_token

    from hfdoctor.findings import Severity
    from hfdoctor.sources.hub import endpoint
    from hfdoctor.webhook.server import ServeConfig, serve
    from hfdoctor.webhook.work import Settings

    selects, ignores = split_list(args.select), split_list(args.ignore)
    check_selectors(selects + ignores)
    secret = args.secret if args.secret is not None else os.environ.get(SECRET_ENV) or None
    if secret is None and not args.insecure_no_secret:
        fail(f"give the webhook's secret: --secret or {SECRET_ENV} (or --insecure-no-secret, for a runner that "
             "only this machine can reach)")
    if secret is not None and not secret.isascii():
        fail("the Hub sends ASCII secrets only: choose one of ASCII characters")
    token = get_token()
    if not token:
        fail("the runner writes on the Hub: set HF_TOKEN (or log in with `hf auth login`) to a token that may "
             "write discussions on the watched repositories")
    settings = Settings(tuple(selects), tuple(ignores), tuple(args.upstream or ()), Severity.parse(args.fail_on),
                        args.check_timeout, args.fix_prs)
    config = ServeConfig(host=args.host, port=args.port, secret=secret, workers=args.workers,
                         queue_size=args.queue_size)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    handler.addFilter(Redact([token, secret]))
    logging.getLogger().addHandler(handler)  # every logger's records pass the filter (huggingface_hub's too)
    logging.getLogger("hfdoctor.webhook").setLevel(logging.INFO)
    try:
        return serve(config, settings, token, endpoint())
    except OSError as err:  # the port is taken, the host is not this machine's
        fail(f"cannot listen on {args.host}:{args.port}: {err.strerror or err}")


class Redact(logging.Filter):
    """The token and the secret never reach the log, whatever a message holds."""

    def __init__(self, secrets: list[str | None]):
        super().__init__()
        self.secrets = [s for s in secrets if s]

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if any(s in text for s in self.secrets):
            for s in self.secrets:
                text = text.replace(s, "***")
            record.msg, record.args = text, ()
        return True


def webhook_serve_parser() -> argparse.ArgumentParser:
    p = new_parser("hfdoctor webhook serve", webhook_serve)
    p.add_argument("--host", default="127.0.0.1", help="Address to listen on (default: 127.0.0.1; 0.0.0.0 in a "
                   "container).")
    p.add_argument("--port", type=at_least(int, 0), default=7860, help="Port to listen on (default: 7860, a "
                   "Docker Space's).")
    p.add_argument("--secret", metavar="SECRET", help=f"The webhook's secret (better: {SECRET_ENV}, which `ps` does "
                   "not show). Deliveries without it get 401.")
    p.add_argument("--insecure-no-secret", action="store_true", help="Take deliveries without a secret (anyone who "
                   "can reach the runner can make it check repositories and comment).")
    rule_filters(p, "Only these rules: codes, names or prefixes (comma-separated).",
                 "Skip these rules: codes, names or prefixes.")
    choice(p, "--fail-on", SEVERITIES, "error", "Lowest severity a push must introduce to open a discussion.")
    p.add_argument("--upstream", action="append", metavar="DIR", help=UPSTREAM_HELP)
    p.add_argument("--fix-prs", action="store_true", help="When a push introduces findings with a safe fix, open "
                   "one `fix --pr` pull request for them (one open at a time).")
    p.add_argument("--workers", type=at_least(int, 1), default=2, metavar="N",
                   help="Deliveries handled at once (default: 2).")
    p.add_argument("--queue-size", type=at_least(int, 1), default=64, metavar="N",
                   help="Deliveries that may wait; one more gets 429 (default: 64).")
    p.add_argument("--check-timeout", type=at_least(float, 1.0), default=120.0, metavar="SECONDS",
                   help="Seconds one check of one revision may take reading the Hub (default: 120).")
    return p


WEBHOOK_COMMANDS: dict[str, Callable[[], argparse.ArgumentParser]] = {"serve": webhook_serve_parser}
