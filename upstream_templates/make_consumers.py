"""Regenerate consumers.json: what the engines that consume model repos accept.

Facts are read from the engines' own published code, never typed by hand:
- which transformers release first knows each config `model_type`: CONFIG_MAPPING_NAMES
  of models/auto/configuration_auto.py in each sampled transformers wheel (pass a folder
  of wheels; the installed transformers is added as the newest);
- each model type's rope_theta default in the newest sampled 4.x release: the default of the
  `rope_theta` argument of its config class's __init__ (read with ast from the wheel's
  configuration_*.py; 4.x reads rope_theta only at the top level of config.json and falls back to
  this default, which is not 10000 for every class: LFM2 1e6, Mixtral 1e6, SmolLM3 2e6); model
  types whose class takes no such argument are left out (what 4.x reads there is not known);
- which model types mlx-lm loads: the modules of mlx_lm/models plus MODEL_REMAPPING of
  the installed mlx-lm (skipped when mlx-lm is not installed);
- llama.cpp's converter's pre-tokenizer hashes: sources/llama_cpp_pre_tokenizers.txt
  (extracted from convert_hf_to_gguf.py at the commit named in its header).
Run:  python upstream_templates/make_consumers.py /path/to/transformers-wheels
"""

import ast
import json
import re
import sys
import zipfile
from importlib.util import find_spec
from pathlib import Path

HERE = Path(__file__).resolve().parent
CONFIG_ENTRY = re.compile(r'^\s+\("([A-Za-z0-9_\-]+)", "[A-Za-z0-9_]+"\),', re.M)
CONFIG_FILE = "transformers/models/auto/configuration_auto.py"
CONFIG_CLASS = re.compile(r'^\s+\("([A-Za-z0-9_\-]+)", "([A-Za-z0-9_]+)"\),', re.M)
CONFIGURATION_MODULE = re.compile(r"transformers/models/[^/]+/configuration_[^/]+\.py$")


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version)[:3])


def config_mapping_names(source: str) -> set[str]:
    """The keys of CONFIG_MAPPING_NAMES (and only that table) in configuration_auto.py."""
    start = source.index("CONFIG_MAPPING_NAMES = OrderedDict")
    end = source.index("\n)\n", start)
    return set(CONFIG_ENTRY.findall(source[start:end]))


def model_types_of_wheel(wheel: Path) -> tuple[str, set[str]]:
    version = wheel.name.split("-")[1]
    with zipfile.ZipFile(wheel) as archive:
        text = archive.read(CONFIG_FILE).decode()
    return version, config_mapping_names(text)


def rope_theta_defaults(wheel: Path) -> dict[str, float]:
    """model_type -> the default of its config class's `rope_theta` __init__ argument, in this wheel."""
    with zipfile.ZipFile(wheel) as archive:
        text = archive.read(CONFIG_FILE).decode()
        start = text.index("CONFIG_MAPPING_NAMES = OrderedDict")
        classes_of = dict(CONFIG_CLASS.findall(text[start:text.index("\n)\n", start)]))
        inits = {}
        for name in archive.namelist():
            if CONFIGURATION_MODULE.match(name):
                for node in ast.parse(archive.read(name)).body:
                    init = next((f for f in getattr(node, "body", ()) if isinstance(f, ast.FunctionDef)
                                 and f.name == "__init__"), None) if isinstance(node, ast.ClassDef) else None
                    if init is not None:
                        inits[node.name] = init.args
    defaults = {}
    for model_type, cls in sorted(classes_of.items()):
        args = inits.get(cls)
        if args is None:
            continue
        named = list(zip(args.args[len(args.args) - len(args.defaults):], args.defaults))
        named += list(zip(args.kwonlyargs, args.kw_defaults))
        for arg, default in named:
            if arg.arg == "rope_theta" and default is not None:
                value = ast.literal_eval(default)
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    defaults[model_type] = float(value)
    return defaults


def installed_transformers() -> tuple[str, set[str]]:
    # 5.x builds the table from more than this one file: ask the module itself.
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    return transformers.__version__, set(CONFIG_MAPPING_NAMES)


def mlx_lm_model_types() -> dict | None:
    if find_spec("mlx_lm") is None:
        return None
    import mlx_lm
    from mlx_lm import utils

    models = Path(mlx_lm.__file__).parent / "models"
    names = {p.stem for p in models.glob("*.py") if not p.stem.startswith("_") and p.stem not in ("base", "cache")}
    remap = dict(getattr(utils, "MODEL_REMAPPING", {}))
    return {"version": mlx_lm.__version__, "source": "mlx_lm/models/*.py and mlx_lm.utils.MODEL_REMAPPING",
            "model_types": sorted(names | set(remap))}


def pre_tokenizers() -> dict:
    lines = (HERE / "sources" / "llama_cpp_pre_tokenizers.txt").read_text().splitlines()
    source = next(line.split(":", 1)[1].strip() for line in lines if line.startswith("# source:"))
    hashes = dict(line.split() for line in lines if line and not line.startswith("#"))
    return {"source": source, "hashes": hashes}


def main(wheels: Path) -> None:
    sampled = sorted((model_types_of_wheel(w) for w in wheels.glob("transformers-*.whl")),
                     key=lambda item: version_key(item[0]))
    sampled.append(installed_transformers())
    first: dict[str, str] = {}
    for version, names in sampled:
        for name in sorted(names):
            first.setdefault(name, version)
    oldest = sampled[0][0]
    wheels_4x = sorted(wheels.glob("transformers-4.*.whl"), key=lambda w: version_key(w.name.split("-")[1]))
    out = {
        "_comment": "generated by make_consumers.py; each section names where its facts come from",
        "transformers": {
            "source": f"{CONFIG_FILE} CONFIG_MAPPING_NAMES of each sampled release",
            "sampled_versions": [v for v, _ in sampled],
            "latest_4x": max((v for v, _ in sampled if v.startswith("4.")), key=version_key),
            # a model type known to the oldest sampled release is recorded as that release
            "oldest_sampled": oldest,
            "model_type_since": dict(sorted(first.items())),
            "rope_theta_default_4x": {
                "source": f"the rope_theta default of each config class's __init__ in {wheels_4x[-1].name}",
                "defaults": rope_theta_defaults(wheels_4x[-1]),
            },
        },
        "mlx_lm": mlx_lm_model_types(),
        "llama_cpp_converter": pre_tokenizers(),
    }
    path = HERE / "consumers.json"
    path.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {path}: {len(first)} model types over {len(sampled)} releases")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
