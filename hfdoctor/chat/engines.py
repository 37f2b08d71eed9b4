"""Render a chat template with the other template engines that serve models, and compare.

transformers renders templates with jinja2; other consumers use other engines, which
accept a different language and render some constructs differently:

- minijinja (Rust): TGI, mistral.rs, NVIDIA dynamo. Configured as TGI configures it:
  trim_blocks, lstrip_blocks, Python-compatible methods (pycompat), and the
  `raise_exception` and `strftime_now` functions. Run through its Python bindings
  (the `minijinja` package), inside hfdoctor's bounded child process, with a fuel limit.
- @huggingface/jinja (JavaScript): transformers.js and LM Studio. Run with node, when
  node and the package are installed where the user put them (HFDOCTOR_NODE_MODULES names
  the node_modules folder, else ~/.cache/hfdoctor/node_modules), in a separate process
  with a time and memory limit. Never the working directory's node_modules, and never a
  node or a package inside the repository being checked: `hfdoctor check .` runs in that
  repository, and its JavaScript is the repository's code (hfdoctor.bounded.programs).

llama.cpp's minja (C++) is not run here: it needs a compiler and a build.

The inputs are exactly those of the reference renders (hfdoctor.chat.render): the same
messages, tools, documents, generation prompt and special tokens, the clock pinned.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from functools import partial
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from hfdoctor.chat import corpus
from hfdoctor.chat.analysis import _render_one
from hfdoctor.chat.consistency import DRIFT_RENDERS
from hfdoctor.chat.render_plan import FIXED_NOW, render_key
from hfdoctor.bounded.sandbox import Limits, run_bounded
from hfdoctor.bounded.programs import find_program, hardened_env

MINIJINJA_FUEL = 5_000_000  # instructions per render: far above any real template
NODE_TIMEOUT_S = 30
# raise_exception and strftime_now are @huggingface/jinja's own globals; the clock is
# pinned by replacing Date before the package is loaded.
NODE_SCRIPT = r"""
let input = "";
process.stdin.on("data", (d) => (input += d));
process.stdin.on("end", () => {
  const {template, cases, now, module} = JSON.parse(input);
  const FIXED = Date.parse(now);
  const RealDate = Date;
  globalThis.Date = class extends RealDate {
    constructor(...a) { if (a.length) { super(...a); } else { super(FIXED); } }
    static now() { return FIXED; }
  };
  const {Template} = require(module);  // an absolute path: never resolved from the working directory
  const out = [];
  let compiled = null;
  try { compiled = new Template(template); } catch (e) { out.push({compile: String(e && e.message || e)}); }
  for (const ctx of compiled ? cases : []) {
    try { out.push({text: compiled.render(ctx)}); } catch (e) { out.push({error: String(e && e.message || e)}); }
  }
  process.stdout.write(JSON.stringify(out));
});
"""


@dataclass(frozen=True)
class EngineResult:
    engine: str
    consumers: tuple[str, ...]
    # (conversation, add_generation_prompt) -> rendered text, or an error message
    texts: dict[tuple[str, bool], str]
    errors: dict[tuple[str, bool], str]
    compile_error: str | None = None
    unavailable: str | None = None  # why the engine could not run here


def cases(special_tokens: dict[str, str]) -> list[tuple[tuple[str, bool], dict[str, Any]]]:
    """The conversations compared, as the context each engine receives."""
    from hfdoctor.chat.render import plain_data, prepare_messages

    found = []
    for name, add_generation_prompt in DRIFT_RENDERS:
        inputs = corpus.conversation(name).inputs()
        context = {**plain_data(special_tokens), "messages": prepare_messages(inputs["messages"]),
                   "tools": plain_data(inputs["tools"]), "documents": plain_data(inputs["documents"]),
                   "add_generation_prompt": add_generation_prompt}
        found.append(((name, add_generation_prompt), context))
    return found


def _now(fmt: str = "%d %b %Y") -> str:
    return FIXED_NOW.strftime(fmt)


def _engines_work(template: str, contexts: list[tuple[tuple[str, bool], dict]], special_tokens: dict[str, str],
                  emit, guard) -> None:
    """In the bounded child: transformers' reference render of each case, then minijinja's."""
    for key, _ in contexts:
        outcome = _render_one(template, render_key(*key), special_tokens, False, guard)
        emit(("reference", key, outcome.text))
    if find_spec("minijinja") is None:
        emit(("unavailable", "the minijinja package is not installed"))
        return
    import minijinja

    def raise_exception(message: str) -> None:
        raise RuntimeError(f"raise_exception: {message}")

    env = minijinja.Environment(trim_blocks=True, lstrip_blocks=True, pycompat=True, fuel=MINIJINJA_FUEL)
    env.add_function("raise_exception", raise_exception)
    env.add_function("strftime_now", _now)
    try:
        with guard.step():
            env.add_template("chat", template)
    except Exception as err:  # minijinja.TemplateError: the template does not parse here
        emit(("compile", str(err).splitlines()[0][:300]))
        return
    for key, context in contexts:
        try:
            with guard.step():
                emit(("text", key, env.render_template("chat", **context)))
        except Exception as err:
            emit(("error", key, str(err).splitlines()[0][:300]))


def reference_and_minijinja(template: str, special_tokens: dict[str, str]
                            ) -> tuple[dict[tuple[str, bool], str | None], EngineResult]:
    """transformers' renders of the cases (None: it fails too) and minijinja's result, from
    one bounded child process."""
    consumers = ("TGI", "mistral.rs", "dynamo")
    result = run_bounded(partial(_engines_work, template, cases(special_tokens), dict(special_tokens)),
                         Limits(total_s=20, step_s=4))
    reference = {tuple(m[1]): m[2] for m in result.messages if m[0] == "reference"}
    unavailable = next((m[1] for m in result.messages if m[0] == "unavailable"), None)
    if unavailable:
        return reference, EngineResult("minijinja", consumers, {}, {}, unavailable=unavailable)
    engine_messages = [m for m in result.messages if m[0] in ("compile", "text", "error")]
    return reference, _collect("minijinja", consumers, engine_messages, result.failure)


def _collect(engine: str, consumers: tuple[str, ...], messages: list, failure: str | None) -> EngineResult:
    texts, errors, compile_error = {}, {}, None
    for message in messages:
        if message[0] == "compile":
            compile_error = message[1]
        elif message[0] == "text":
            texts[tuple(message[1])] = message[2]
        else:
            errors[tuple(message[1])] = message[2]
    if failure and not texts and not errors and compile_error is None:
        return EngineResult(engine, consumers, {}, {}, unavailable=f"the engine did not finish ({failure})")
    return EngineResult(engine, consumers, texts, errors, compile_error)


def node_modules(forbidden: Path | None = None) -> Path | None:
    """Where the user installed @huggingface/jinja: HFDOCTOR_NODE_MODULES (an absolute path),
    else ~/.cache/hfdoctor/node_modules; never inside `forbidden` (the checked repository)."""
    candidates = [os.environ.get("HFDOCTOR_NODE_MODULES"), _home_modules()]
    refused = Path(os.path.realpath(forbidden)) if forbidden else None
    for candidate in candidates:
        if not candidate or not os.path.isabs(candidate):
            continue
        real = Path(os.path.realpath(candidate))
        if refused is not None and (real == refused or refused in real.parents):
            continue
        try:
            if (real / "@huggingface" / "jinja" / "package.json").is_file():
                return real
        except OSError:  # an unreadable $HOME (PermissionError from stat): not installed there
            continue
    return None


def _home_modules() -> str | None:
    """~/.cache/hfdoctor/node_modules; None when there is no home directory to name."""
    try:
        return str(Path.home() / ".cache" / "hfdoctor" / "node_modules")
    except (RuntimeError, KeyError):  # no $HOME and no passwd entry
        return None


@dataclass(frozen=True)
class HfJinjaRuntime:
    """The node program and @huggingface/jinja package a render would use (None: not
    installed, or only inside the repository being checked). Renders depend on these, not on
    where the repository is: copies of a repository share them."""

    node: str | None
    modules: Path | None


def hf_jinja_runtime(repo_root: Path | None) -> HfJinjaRuntime:
    return HfJinjaRuntime(find_program("node", [repo_root] if repo_root else []), node_modules(repo_root))


def installed_versions(repo_root: Path | None, runtime: HfJinjaRuntime | None = None) -> dict[str, str | None]:
    """The version of each engine this machine would render with (None: not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        mini = version("minijinja")
    except PackageNotFoundError:
        mini = None
    hf, runtime = None, runtime or hf_jinja_runtime(repo_root)
    if runtime.modules is not None and runtime.node is not None:
        try:
            hf = json.loads((runtime.modules / "@huggingface" / "jinja" / "package.json").read_text()).get("version")
        except (OSError, ValueError):
            hf = None
    return {"minijinja": mini, "@huggingface/jinja": hf}


def run_hf_jinja(template: str, special_tokens: dict[str, str], repo_root: Path | None = None,
                 runtime: HfJinjaRuntime | None = None) -> EngineResult:
    consumers = ("transformers.js", "LM Studio")
    runtime = runtime or hf_jinja_runtime(repo_root)
    node, modules = runtime.node, runtime.modules
    if node is None or modules is None:
        return EngineResult("@huggingface/jinja", consumers, {}, {},
                            unavailable="node or the @huggingface/jinja package is not installed")
    keyed = cases(special_tokens)
    payload = json.dumps({"template": template, "cases": [c for _, c in keyed], "now": FIXED_NOW.isoformat(),
                          "module": str(modules / "@huggingface" / "jinja")})
    try:
        proc = subprocess.run([node, "--max-old-space-size=512", "-e", NODE_SCRIPT], input=payload,
                              capture_output=True, text=True, timeout=NODE_TIMEOUT_S, env=hardened_env(),
                              cwd=str(modules))
        out = json.loads(proc.stdout) if proc.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError) as err:
        return EngineResult("@huggingface/jinja", consumers, {}, {}, unavailable=f"node failed: {err}")
    if out is None:
        return EngineResult("@huggingface/jinja", consumers, {}, {},
                            unavailable=f"node failed: {proc.stderr.strip()[:200]}")
    if out and "compile" in out[0]:
        return EngineResult("@huggingface/jinja", consumers, {}, {}, out[0]["compile"][:300])
    texts, errors = {}, {}
    for (key, _), item in zip(keyed, out):
        if "text" in item:
            texts[key] = item["text"]
        else:
            errors[key] = item["error"][:300]
    return EngineResult("@huggingface/jinja", consumers, texts, errors)


def run_all(template: str, special_tokens: dict[str, str], repo_root: Path | None = None,
            runtime: HfJinjaRuntime | None = None) -> tuple[dict[tuple[str, bool], str | None], list[EngineResult]]:
    """transformers' reference renders, and every other engine's result."""
    reference, minijinja = reference_and_minijinja(template, special_tokens)
    return reference, [minijinja, run_hf_jinja(template, special_tokens, repo_root, runtime)]
