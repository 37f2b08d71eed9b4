"""SEC002 remote-code: an auto_map sends transformers to Python files (loading needs
trust_remote_code). Kept apart from the pickle scans of security.py, which lists it among the
SEC rules; the code is read as text only (hfdoctor.repo.remote_code), never run."""

from __future__ import annotations

from typing import Iterator

from hfdoctor.compat import knowledge as kb
from hfdoctor.findings import Facet, FacetKind, Finding, Severity
from hfdoctor.knowledge import registry
from hfdoctor.lint.rules.base import FixAvailability, Rule, rule
from hfdoctor.repo import ModelRepo
from hfdoctor.repo.remote_code import experts_in_dense_type


def _auto_map_refs(auto_map: dict) -> list[tuple[str, str]]:
    """(auto class, 'module.Class' or 'org/repo--module.Class') pairs of an auto_map."""
    refs = []
    for auto_class, value in auto_map.items():
        for ref in value if isinstance(value, list) else [value]:
            if isinstance(ref, str) and ref:
                refs.append((str(auto_class), ref))
    return refs


@rule("SEC002", "remote-code", Severity.WARNING, fix=FixAvailability.NONE)
def remote_code(repo: ModelRepo, self: Rule) -> Iterator[Finding]:
    """config.json or tokenizer_config.json has an `auto_map`: loading needs trust_remote_code.

    Why: `auto_map` points transformers at Python files (modeling_*.py, tokenization_*.py)
    in this repository or another one. Loading with trust_remote_code=True imports and runs
    them with the user's rights, and they change whenever the repository does (pin a
    revision). When transformers has a native implementation of the model type, the
    remote code is not needed at all.

    Example: "auto_map": {"AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM"}.

    Severity: warning; info when transformers has a native implementation of the
    model_type (the usual load never runs the code; the message says since which release),
    unless the code builds another model than that native class (a mixture of experts under
    a dense model_type: config-architecture-mismatch), which only the code loads,
    and info when the model type is a family its maker publishes only as remote code
    (ChatGLM, Qwen 1, InternLM/InternLM2, MiMo, the first phi-1.5 releases; for an adapter
    with no config.json, the family its tokenizer's code names), or one no transformers
    release knows at all (an architecture of its own; a config with no model_type whose
    AutoConfig is the code's): there is no other way to load it, by its authors' design.

    Fix: none automatic; read the code before trusting it, pin `revision=`, or load the
    native transformers class (without trust_remote_code) when there is one.
    """
    present = set(repo.files)
    for rel, data in (("config.json", repo.config), ("tokenizer_config.json", repo.tokenizer_config)):
        auto_map = (data or {}).get("auto_map")
        if not isinstance(auto_map, dict):
            continue
        refs = _auto_map_refs(auto_map)
        if not refs:
            continue
        files = []
        for _, ref in refs:
            repo_id, _, local = ref.rpartition("--")
            module = local.rsplit(".", 1)[0].replace(".", "/") + ".py"
            if repo_id:
                files.append(f"{module} from {repo_id}")
            else:
                files.append(module + ("" if module in present else " (not in this checkout)"))
        files = list(dict.fromkeys(files))
        model_type = (repo.config or {}).get("model_type")
        since = kb.transformers_since(model_type) if rel == "config.json" and isinstance(model_type, str) else None
        if since is None and isinstance(model_type, str) and model_type in registry.architectures():
            since = "the installed release"
        other_model = experts_in_dense_type(repo) if rel == "config.json" else None
        if other_model is not None:
            since = None  # the native class is another model (dense): loading without the code breaks it
        native = (f" transformers has a native {model_type} implementation (since {since}): load without "
                  "trust_remote_code." if since else "")
        if other_model is not None:
            native = (f" The code is not transformers' {model_type}: it builds a mixture of experts "
                      "(config-architecture-mismatch), so only it loads these weights.")
        facets = (Facet(FacetKind.AVOIDABLE, f"transformers loads {model_type} natively since {since}, without "
                                             "this code"),) if since else ()
        only_remote = (registry.remote_code_family(model_type) if rel == "config.json" and not since
                       and other_model is None else None)
        if only_remote is None and rel == "tokenizer_config.json" and not since:
            only_remote = (registry.remote_code_family((repo.config or {}).get("model_type"))
                           or _family_of_code(refs))
        if only_remote is not None:  # the family exists only as its maker's remote code
            facets = (Facet(FacetKind.UPSTREAM_DESIGN, f"{only_remote.display} upstream "
                                                       f"({only_remote.remote_code_repo} is published only as remote "
                                                       f"code: transformers has no native "
                                                       f"{model_type or 'implementation'})"),)
        elif other_model is None and isinstance(model_type, str) and model_type \
                and not kb.transformers_since(model_type) and model_type not in registry.architectures():
            # An architecture of its own (no transformers release knows the model type): its code, its
            # tokenizer's too (Baichuan2), is the only way to load it, by its authors' design; the warning
            # is for code a native class makes needless.
            facets = (Facet(FacetKind.UPSTREAM_DESIGN, f"model_type {model_type!r} exists only as this code: "
                                                       "transformers has no implementation of it"),)
        elif rel == "config.json" and not model_type and other_model is None and "AutoConfig" in auto_map:
            # No model_type at all: even the config class is the code's (LLaVA-OneVision-1.5), so nothing
            # but the code can load it.
            facets = (Facet(FacetKind.UPSTREAM_DESIGN, "config.json names no model_type and its config class is "
                                                       "this code's: transformers has no implementation of it"),)
        auto_class, ref = refs[0]
        yield self.finding(
            repo,
            f"{rel} auto_map sends {auto_class} to {ref}"
            + (f" (and {len(refs) - 1} more)" if len(refs) > 1 else "")
            + f": loading needs trust_remote_code=True, which runs {', '.join(files)} on the user's machine."
            + native,
            file=rel, pointer="/auto_map", facets=facets,
        )


def _family_of_code(refs: list[tuple[str, str]]):
    """The remote-code family a tokenizer's auto_map module names (tokenization_chatglm: ChatGLM)."""
    for _, ref in refs:
        module = ref.rpartition("--")[2].rsplit(".", 1)[0]
        if module.startswith("tokenization_"):
            found = registry.remote_code_family(module.removeprefix("tokenization_"))
            if found is not None:
                return found
    return None


# SEC004-SEC009 were part of SEC001 until 0.4.
