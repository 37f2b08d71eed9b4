"""Weights, from their headers alone: what the files are, what they look like, what the config expects.

- headers: safetensors header reader (strict as the safetensors library), git-lfs
  pointers, and the sorted view of a repo's weight files (`repo_weights`).
- layout: what the tensor names and shapes say about the architecture, and which
  registry families have such checkpoints (no torch).
- expected: what transformers would save for the config, fastest first: the shipped table,
  computed (the families of `computed`), the user's cache (`layout_cache`), else built by
  transformers on the meta device in a bounded child (`build`, the only place torch is imported);
  `outcome` is the data they all return.

Tensor data is never read. These modules import the registry and (for types) the repo,
never rules, check or fix.
"""
