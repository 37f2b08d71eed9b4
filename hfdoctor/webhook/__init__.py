"""`hfdoctor webhook serve`: the Hub webhook runner, CI where model repositories live.

The Hub POSTs a JSON payload to a URL the owner registers on every push, pull request and
comment. The runner takes each delivery (`server`: bounded HTTP, the secret, 202/400/401/413/429
at once), reads what it is about (`payload`), queues it (`runner`: a bounded queue, a worker pool,
one delivery handled once), checks the two revisions it compares with `lint.check` (`work`), matches
their findings (`changes`), and says what the change introduced and fixed on the Hub (`comment` for
the text, `hub` for the calls, with retries): one comment per pull request, updated in place; one
discussion for a push that introduces errors; with --fix-prs one `fix --pr` pull request at a time.

Nothing from the repository runs, and nothing below this package knows it exists.
"""
