"""The assessment of one repository against the consuming engines.

Each detector reads the files and returns Problems: one fact, the engines it affects
(caveat or fails) and why. The report's `compat` section folds them per engine; the
compat rules (hfdoctor.lint.rules.compat) report them as findings, with fixes where certain.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from hfdoctor import lineage
from hfdoctor.compat import knowledge as kb
from hfdoctor.compat.model_support import loads_on_4x_at_all
from hfdoctor.compat.portability import template_portability
from hfdoctor.compat.targets import declared_transformers_4, targeted_engines
from hfdoctor.repo import ModelRepo
from hfdoctor.bounded.tokenizing import TokenizerFailed
from hfdoctor.findings import Severity
from hfdoctor.weights.compare import compare
from hfdoctor.weights.headers import repo_weights
from hfdoctor.repo.facts import fact
from hfdoctor.bounded.memo import memo

STATUS_ORDER = {"loads": 0, "unknown": 0, "caveat": 1, "fails": 2}
SERVE_FLAG = re.compile(r"--(reasoning|tool-call)-parser(?:[ =]+)['\"]?([A-Za-z0-9_\-]+)")


@dataclass(frozen=True)
class Problem:
    rule: str  # the contract rule name that reports it
    engines: dict[str, str]  # engine -> caveat | fails
    why: str
    # The severity of the compat rule's finding (hfdoctor.lint.policy may lower it). None: no
    # finding, the problem is for the compat section only (another rule reports it, or it is
    # not a fault of the files).
    severity: Severity | None = Severity.WARNING
    file: str | None = None
    pointer: str | None = None
    data: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)  # for the rule's fix
    # The engines whose users the finding is for, when it is not everyone who loads the
    # repository (TGI, the leaderboard, transformers releases before 4.48): the severity
    # policy lowers it to info unless the repository targets one of them.
    audience: tuple[str, ...] = ()
    severity_reason: str | None = None  # why the detector chose `severity`, for the finding


Detector = Callable[[ModelRepo], Iterator[Problem]]


def _on_4x_stacks(status_4x: str) -> dict[str, str]:
    return {"transformers-4": status_4x, **{e: "caveat" for e in kb.BUNDLES_TRANSFORMERS_4}}


def _has_transformers_files(repo: ModelRepo) -> bool:
    return repo.config is not None and not repo.is_adapter


def v5_rope(repo: ModelRepo) -> Iterator[Problem]:
    """rope_theta only inside rope_parameters (transformers 5's layout), where 4.x reads another value.

    4.x reads the top-level rope_theta and falls back to its config class's own default
    (kb.rope_theta_default_4x: 10000 for most, 1e6 for LFM2 and Mixtral). Nothing is said when
    that default is the value anyway, when no 4.x release has the model type (4.x refuses the
    config: model_type_support says so), or when its class takes no rope_theta (what it reads is
    not known). A warning, since every checkpoint transformers 5 saves is written this way; an
    error when the repository declares a 4.x consumer (compat.targets.declared_transformers_4).
    """
    config = repo.config
    if not _has_transformers_files(repo) or "rope_theta" in config:
        return
    model_type = config.get("model_type")
    default = kb.rope_theta_default_4x(model_type) if isinstance(model_type, str) and _known_to_4x(model_type) else None
    rope = config.get("rope_parameters")
    theta = rope.get("rope_theta") if isinstance(rope, dict) else None
    if default is None or not isinstance(theta, (int, float)) or isinstance(theta, bool) or float(theta) == default:
        return
    rope_type = rope.get("rope_type", "default")
    scaling = (f"; its {rope_type!r} scaling (in rope_parameters) is ignored too, as 4.x reads only rope_scaling"
               if rope_type != "default" and "rope_scaling" not in config else "")
    declared = declared_transformers_4(repo)
    yield Problem(
        "consumer-incompatible", _on_4x_stacks("fails"),
        f"config.json has rope_theta {theta:g} only inside rope_parameters (as transformers 5 saves it): "
        f"transformers 4.x reads the top-level rope_theta and silently falls back to {model_type}'s default "
        f"{default:g}, so every position's rotary frequency is wrong and output degrades without an error "
        f"(vLLM, SGLang and TGI releases that bundle 4.x do the same: vLLM #42624, #44158){scaling}",
        severity=Severity.ERROR if declared else Severity.WARNING, file="config.json", pointer="/rope_parameters",
        data={"rope_theta": theta},
        severity_reason=f"a transformers 4.x consumer is declared: {declared}" if declared else
        "nothing in the repository declares a transformers 4.x consumer (a pin below 5, TGI, the leaderboard)")


def _known_to_4x(model_type: object) -> bool:
    """Whether some transformers 4.x release knows this model_type (remote code: assume it does)."""
    if not isinstance(model_type, str):
        return True
    since = kb.transformers_since(model_type)
    return since is not None and kb.version_key(since) <= kb.version_key(kb.latest_4x())


def v5_tokenizer_class(repo: ModelRepo) -> Iterator[Problem]:
    """tokenizer_class TokenizersBackend, which only transformers 5 defines: every 4.x AutoTokenizer raises.

    That breaks only where 4.x could load the model at all: when the model's type (config.json's,
    or an adapter's base's) first appears in transformers 5, every consumer that loads it runs 5,
    which reads the class (info, saying why). When an adapter's base type is known only from its
    name, hfdoctor does not guess it: the warning stays (most bases exist in 4.x) and says what
    it cannot verify.
    """
    cls = (repo.tokenizer_config or {}).get("tokenizer_class")
    if cls not in kb.V5_ONLY_TOKENIZER_CLASSES:
        return
    loads_on_4x, source = loads_on_4x_at_all(repo)
    why = (f"tokenizer_config.json names tokenizer_class {cls!r}, which only transformers 5 defines: AutoTokenizer "
           f"raises on every 4.x release, and so do llama.cpp's convert_hf_to_gguf (it runs on 4.x), mlx-lm and "
           f"GPTQModel installed beside 4.x (unsloth #8448, transformers #47553)")
    data = {"has_tokenizer_json": repo.tokenizer_json is not None}
    if loads_on_4x is False:
        yield Problem("consumer-incompatible", _on_4x_stacks("fails"),
                      f"{why}; no 4.x release can load this model anyway ({source} first appears in transformers 5), "
                      f"so every consumer that loads it reads the class",
                      severity=Severity.INFO, file="tokenizer_config.json", pointer="/tokenizer_class",
                      severity_reason=f"{source} exists in no transformers 4.x release")
        return
    if loads_on_4x is None:
        # Most bases exist in 4.x, where the failure is real: still a warning, with what is not known.
        why += (f". This does not apply if the base's model type first appears in transformers 5 (then only 5 "
                f"loads it), which hfdoctor cannot tell here: {source}")
    yield Problem(
        "consumer-incompatible",
        {**_on_4x_stacks("fails"), "llama.cpp": "fails", "mlx-lm": "caveat"}, why,
        file="tokenizer_config.json", pointer="/tokenizer_class", data=data)


def model_type_support(repo: ModelRepo) -> Iterator[Problem]:
    config = repo.config
    model_type = config.get("model_type") if _has_transformers_files(repo) else None
    if not isinstance(model_type, str) or "auto_map" in config:
        return  # remote code is custom-code's concern
    since = kb.transformers_since(model_type)
    if since is None:
        yield Problem("consumer-incompatible", {"transformers-5": "caveat", **_on_4x_stacks("fails")},
                      f"model_type {model_type!r} is unknown to every transformers release hfdoctor knows "
                      f"(up to {kb.newest_transformers()})", severity=None, file="config.json", pointer="/model_type")
    elif kb.version_key(since) > kb.version_key(kb.latest_4x()):
        yield Problem("consumer-incompatible", _on_4x_stacks("fails"),
                      f"model_type {model_type!r} first appears in transformers {since}: no 4.x release (the newest is "
                      f"{kb.latest_4x()}) can load it, nor can vLLM/SGLang/TGI releases bundling 4.x (vLLM #36217)",
                      severity=Severity.INFO, file="config.json", pointer="/model_type")
    mlx = kb.mlx_lm_knows(model_type)
    if mlx is not None and not mlx[0]:
        yield Problem("consumer-incompatible", {"mlx-lm": "fails"},
                      f"mlx-lm {mlx[1]} has no model for model_type {model_type!r}", severity=None)


def template_only_in_jinja(repo: ModelRepo) -> Iterator[Problem]:
    jinja = next((s for s in repo.chat_templates if s.file == "chat_template.jinja"), None)
    config = repo.tokenizer_config
    if jinja is None or config is None or "chat_template" in config:
        return
    yield Problem(
        "consumer-incompatible",
        {"tgi": "fails", "transformers-4": "caveat", "open-llm-leaderboard": "fails"},
        "the chat template is only in chat_template.jinja: TGI (#3247), transformers before "
        f"{kb.JINJA_FILE_SINCE} and the Open LLM Leaderboard's validator read only tokenizer_config.json's "
        "`chat_template`, so they see a model without a chat template",
        file="tokenizer_config.json", data={"template": jinja.text}, audience=("tgi", "open-llm-leaderboard"))


def portability(repo: ModelRepo) -> Iterator[Problem]:
    source = repo.chat_template
    if source is None:
        return
    engine_keys = {"minijinja": ("tgi",), "@huggingface/jinja": ("transformers.js",)}
    for verdict in template_portability(repo, source):
        if verdict.portable:
            continue
        status = "fails" if verdict.outcome == "fails" else "caveat"
        severity = {"fails": Severity.WARNING, "differs": Severity.WARNING,
                    "whitespace": Severity.INFO}[verdict.outcome]
        yield Problem("template-portability", {e: status for e in engine_keys.get(verdict.engine, ())},
                      f"{verdict.engine} ({', '.join(verdict.consumers)}): {verdict.detail}",
                      severity=severity, file=source.file, pointer=source.pointer,
                      audience=engine_keys.get(verdict.engine, ()))


def chk_hash(repo: ModelRepo) -> str | None:
    """llama.cpp's converter's fingerprint of a byte-level BPE pre-tokenizer, or None.

    Known tokenizer.json files (byte-identical to an upstream one, as most fine-tunes'
    are) are looked up by sha256 in the shipped table; others are computed once per file."""
    tok = repo.tokenizer_json
    model = tok.get("model") if isinstance(tok, dict) else None
    if not isinstance(model, dict) or model.get("type") != "BPE" or model.get("byte_fallback"):
        return None
    if "ByteLevel" not in str(tok.get("pre_tokenizer")):
        return None
    key = hashlib.sha256(repo.raw("tokenizer.json") or b"").hexdigest()
    known = kb.tokenizer_fingerprint(key)
    if known is not None:
        return known
    return CONVERTER_FINGERPRINTS.lookup(key, lambda: compute_chk_hash(repo))


def compute_chk_hash(repo: ModelRepo) -> str | None:
    """The converter's fingerprint, from the repo's own tokenizer (half a second for 150k tokens)."""
    if repo.tokenizer is None:
        return None
    # The converter encodes with transformers' AutoTokenizer; the fast tokenizer adds the
    # post-processor's special tokens like add_special_tokens=True (checked on Qwen3, Llama 3.1).
    try:
        ids = repo.tokenizer.encode(kb.chktxt(), add_special_tokens=True).ids
    except TokenizerFailed:
        return None  # the tokenizer cannot encode (it panics): file-unreadable says it
    return hashlib.sha256(str(ids).encode()).hexdigest()


# sha256 of tokenizer.json -> the converter's fingerprint (half a second each for a 150k vocabulary).
CONVERTER_FINGERPRINTS = memo("converter fingerprints", 64)


GEMMA_SPM = ("gemma", "gemma2")


def gguf_conversion(repo: ModelRepo) -> Iterator[Problem]:
    if not _has_transformers_files(repo) or repo.gguf.headers:
        return
    model_type = repo.config.get("model_type")
    if model_type in GEMMA_SPM and not repo.exists("tokenizer.model") and repo.tokenizer_json is not None:
        yield Problem("gguf-convert-blocker", {"llama.cpp": "fails"}, audience=("llama.cpp",), why=
                      f"a {model_type} checkpoint without tokenizer.model: llama.cpp's converter builds Gemma "
                      "vocabularies only from the SentencePiece model (unsloth #785, llama.cpp #9673); copy "
                      "tokenizer.model from the base model", severity=Severity.ERROR, file="tokenizer.json")
        return
    if repo.exists("tokenizer.model"):
        return  # the converter takes the SentencePiece path
    digest = chk_hash(repo)
    if digest is not None and kb.pre_tokenizer_name(digest) is None:
        yield Problem("gguf-convert-blocker", {"llama.cpp": "fails"}, audience=("llama.cpp",), why=
                      f"llama.cpp's convert_hf_to_gguf does not recognise this tokenizer's pre-tokenizer (chkhsh "
                      f"{digest[:16]}...; 'BPE pre-tokenizer was not recognized', llama.cpp #8649): it refuses to "
                      f"convert until the hash is registered (checked against {kb.converter_source()[:60]})",
                      file="tokenizer.json", pointer="/pre_tokenizer", data={"chkhsh": digest})


def weights_metadata(repo: ModelRepo) -> Iterator[Problem]:
    view = repo_weights(repo)
    missing = [rel for rel in view.main_files if rel in view.headers and view.headers[rel].metadata is None]
    invalid = [rel for rel in view.main_files if rel in view.headers and view.headers[rel].metadata is not None
               and view.headers[rel].metadata.get("format") not in kb.SAFETENSORS_FORMATS_4X]
    if invalid:
        fmt = view.headers[invalid[0]].metadata.get("format")
        yield Problem("weights-metadata", {"transformers-4": "fails", "open-llm-leaderboard": "fails"},
                      f"{len(invalid)} safetensors file(s) have __metadata__ without a `format` transformers 4.x "
                      f"accepts ({invalid[0]}: {fmt!r}; expected one of {', '.join(kb.SAFETENSORS_FORMATS_4X)}): "
                      "every 4.x release refuses to load them (mlx #743); re-save with metadata={'format': 'pt'}",
                      severity=Severity.ERROR, file=invalid[0])
    if missing:
        yield Problem("weights-metadata", {"transformers-4": "caveat", "open-llm-leaderboard": "caveat"},
                      f"{len(missing)} safetensors file(s) have no __metadata__ ({missing[0]}): transformers before "
                      f"{kb.METADATA_OPTIONAL_SINCE} refuse to load them; re-save with metadata={{'format': 'pt'}}",
                      file=missing[0], audience=("open-llm-leaderboard",))


def _is_single_token(repo: ModelRepo, text: str) -> bool:
    return text in (repo.vocab or {})


def serving_parsers(repo: ModelRepo) -> Iterator[Problem]:
    card = repo.card
    if card is None:
        return
    default = repo.chat_template
    templates = default.text if default is not None else ""
    seen = set()
    for match in SERVE_FLAG.finditer(card.text):
        kind = "reasoning" if match.group(1) == "reasoning" else "tool_call"
        name = match.group(2)
        entry = kb.parser(kind, name)
        if entry is None or (kind, name) in seen:
            continue
        seen.add((kind, name))
        line = card.text.count("\n", 0, match.start()) + 1
        flag = f"--{match.group(1)}-parser {name}"
        needs = entry["single_tokens"]
        needs = entry["markers"] if needs is True else needs or []
        if repo.vocab is not None:
            not_tokens = [m for m in needs if not _is_single_token(repo, m)]
            if not_tokens:
                yield Problem("serving-parser-mismatch", {"vllm": "fails", "sglang": "caveat"},
                              f"README.md (line {line}) serves with {flag}, but {', '.join(not_tokens)} "
                              f"{'is' if len(not_tokens) == 1 else 'are'} not single tokens of this vocabulary: vLLM "
                              f"refuses to start ('could not locate ... tokens in the tokenizer!'; {entry['source']})",
                              severity=Severity.ERROR, file="README.md", data={"line": line})
                continue
        if kind == "tool_call" and entry["markers"] and templates \
                and not any(m in templates for m in entry["markers"]) and _template_does_tools(templates):
            yield Problem("serving-parser-mismatch", {"vllm": "caveat", "sglang": "caveat"},
                          f"README.md (line {line}) serves with {flag}, which parses {', '.join(entry['markers'])}, "
                          "but the chat template teaches tool calls without them: tool calls come back as plain text",
                          file="README.md", data={"line": line})


def _template_does_tools(templates: str) -> bool:
    return "tools" in templates or "tool_calls" in templates


def thinking_markers(repo: ModelRepo) -> Iterator[Problem]:
    """A reasoning family whose <think>/</think> are not single tokens of the vocabulary."""
    found = lineage.detect(repo)
    family, variant = found.family_ref, found.variant_ref
    if family is None or variant is None or variant.thinking == "none" or repo.vocab is None or not found.certain:
        return
    markers = [t for t in ("<think>", "</think>") if t in family.signature_tokens]
    lost = [m for m in markers if not _is_single_token(repo, m)]
    if lost:
        yield Problem("serving-parser-mismatch", {"vllm": "caveat", "sglang": "caveat"},
                      f"{variant.display} reasons inside <think>...</think>, but {', '.join(lost)} "
                      f"{'is' if len(lost) == 1 else 'are'} not single tokens of this vocabulary: the reasoning "
                      "parsers (deepseek_r1, qwen3) refuse to start and the model cannot emit the markers its "
                      "training used (vLLM #13125)", severity=Severity.ERROR,
                      file="tokenizer.json" if repo.tokenizer_json is not None else None)


# Every engine that loads the safetensors weights into the model config.json declares.
LOADS_WEIGHTS = ("transformers-5", "transformers-4", "vllm", "sglang", "tgi", "llama.cpp", "mlx-lm",
                 "open-llm-leaderboard")


def weights_fit(repo: ModelRepo) -> Iterator[Problem]:
    """Weights that do not load into the declared model fail everywhere (weights-config-mismatch says it)."""
    comparison = compare(repo)
    if comparison is None or comparison.loads is not False:
        return
    if comparison.rejected:
        why = f"transformers cannot build the model config.json declares: {comparison.rejected}"
    else:
        counts = [f"{len(names)} {what}" for names, what in ((comparison.missing, "missing"),
                                                              (comparison.wrong, "wrong-shaped")) if names]
        why = (f"the weights do not fit the {comparison.expected.model_class} config.json declares "
               f"({' and '.join(counts)} tensors): loading fails or leaves parameters random")
    yield Problem("weights-config-mismatch", dict.fromkeys(LOADS_WEIGHTS, "fails"), why, severity=None)


DETECTORS: tuple[Detector, ...] = (v5_rope, v5_tokenizer_class, model_type_support, template_only_in_jinja,
                                   portability, gguf_conversion, weights_metadata, weights_fit, serving_parsers,
                                   thinking_markers)
@fact
def assess(repo: ModelRepo) -> list[Problem]:
    """Every compatibility problem of the repo (a fact: computed once per repository)."""
    return [p for detector in DETECTORS for p in detector(repo)]


def section(repo: ModelRepo, problems: list[Problem]) -> list[dict[str, str]]:
    """The report's `compat` section: one entry per engine, its worst status and every reason.

    `loads` only where every check hfdoctor has for that engine ran and found nothing;
    `unknown` where one could not run (no weights to compare, no tokenizer, a GGUF-only
    folder for a transformers engine): no blocker found is not proof that it loads. A
    problem whose finding is info (an engine the repository does not target) makes the
    engine a `caveat`, never `fails`: the headline never says more than the findings."""
    entries = []
    for engine, label in kb.ENGINES.items():
        statuses = [(engine_status(repo, p, engine), p) for p in problems if engine in p.engines]
        mine = sorted(statuses, key=lambda sp: -STATUS_ORDER[sp[0]])  # worst first: its reason leads
        if mine:
            status, why = mine[0][0], "; ".join(p.why for _, p in mine)
        else:
            unverified = not_verified(repo, engine)
            status = "unknown" if unverified else "loads"
            why = _loads_why(repo, engine) + (f"; not verified: {unverified}" if unverified else "")
        entries.append({"engine": engine, "status": status, "why": why, "what": label})
    return entries


def engine_status(repo: ModelRepo, problem: Problem, engine: str) -> str:
    """The problem's status for the engine, as loud as its finding (hfdoctor.lint.policy lowers a
    finding for engines the repository does not target to info)."""
    status = problem.engines[engine]
    if status != "fails" or problem.severity is None:
        return status
    untargeted = problem.audience and not set(problem.audience) & set(targeted_engines(repo))
    info = problem.severity == Severity.INFO or untargeted
    return "caveat" if info else status


def not_verified(repo: ModelRepo, engine: str) -> str | None:
    """Why hfdoctor cannot say that `engine` loads this repository (what it would need to
    check is not there, or the check could not run); None when every check ran."""
    ggufs = [f for f in repo.files if f.lower().endswith(".gguf")]
    if engine == "llama.cpp":
        if ggufs:
            return None if repo.gguf.headers else "its GGUF files could not be read"
        if not _has_transformers_files(repo):
            return "no config.json and no GGUF file: nothing llama.cpp converts or loads"
        if repo.exists("tokenizer.model") or chk_hash(repo) is not None:
            return _weights_unverified(repo)
        return "the converter's pre-tokenizer check applies to byte-level BPE tokenizers, and this is not one"
    if engine == "transformers.js":
        if not any(f.startswith("onnx/") and f.endswith(".onnx") for f in repo.files):
            return "no ONNX weights (onnx/*.onnx), the only weights transformers.js loads"
        return _template_unverified(repo, engine)
    if repo.is_adapter:
        return "a PEFT adapter loads with its base model, which is not checked here"
    if not _has_transformers_files(repo):
        return f"no config.json: nothing {kb.ENGINES[engine].split(' (')[0]} loads" + (
            f" (the folder holds GGUF files only: {ggufs[0]})" if ggufs else "")
    if engine == "mlx-lm" and kb.mlx_lm_knows(str(repo.config.get("model_type"))) is None:
        return "hfdoctor has no table of mlx-lm's models"
    if repo.tokenizer_json is None and not repo.exists("tokenizer.model"):
        return "no tokenizer.json or tokenizer.model"
    return _weights_unverified(repo) or (_template_unverified(repo, engine) if engine == "tgi" else None)


def _weights_unverified(repo: ModelRepo) -> str | None:
    if not repo_weights(repo).main_tensors():
        return "no safetensors weights here to compare with config.json"
    comparison = compare(repo)
    if comparison is not None and comparison.loads is None:
        return f"the weights could not be compared with config.json ({comparison.cannot_verify or 'no model built'})"
    return None


def _template_unverified(repo: ModelRepo, engine: str) -> str | None:
    if repo.chat_template is None:
        return None
    verdict = next((v for v in template_portability(repo, repo.chat_template)
                    if v.engine == TEMPLATE_ENGINES[engine]), None)
    if verdict is None or verdict.outcome == "unavailable":
        return f"the chat template was not rendered in {TEMPLATE_ENGINES[engine]} here"
    return None


TEMPLATE_ENGINES = {"tgi": "minijinja", "transformers.js": "@huggingface/jinja"}


def _loads_why(repo: ModelRepo, engine: str) -> str:
    why = "no blocker found in the files"
    model_type = (repo.config or {}).get("model_type")
    if engine == "transformers-4" and isinstance(model_type, str) and not repo.is_adapter:
        since = kb.transformers_since(model_type)
        if since is not None:
            why += f"; model_type {model_type!r} needs transformers >= {since}"
    if engine in TEMPLATE_ENGINES and repo.chat_template is not None:
        verdict = next((v for v in template_portability(repo, repo.chat_template)
                        if v.engine == TEMPLATE_ENGINES[engine]), None)
        if verdict is not None:
            why += f"; chat template in {verdict.engine}: {verdict.detail}"
    return why
