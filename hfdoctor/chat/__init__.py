"""The chat template engine: render exactly as transformers does, over a corpus, in a sandbox.

- corpus: the conversations every template is rendered on (needle strings);
- renders: the render plan and what each render gives (no jinja2); the lowest module;
- render: the jinja2 environment of transformers' apply_chat_template;
- sandbox: a forked worker bounded in time and memory;
- analysis: one bounded run per template, cached on the repo; store: shipped analyses
  of the canonical templates;
- capabilities, consistency, turns: what the renders say (features, prefix stability,
  train/inference agreement, drift, the end-of-turn token).

Nothing here imports rules, check or fix.
"""
