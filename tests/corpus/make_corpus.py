"""Build tests/corpus/: real chat templates that other projects publish, with provenance.

hfdoctor's precision is measured on templates it did not write and that are not the
registry's canonical ones: the copies and adaptations that training and serving
projects ship and their users put into model repos. This script extracts them from git
checkouts of those projects (all permissively licensed) into
tests/corpus/templates/<project>/<name>.jinja and records, for each, the repository,
path, commit, sha256 and license in tests/corpus/MANIFEST.tsv.

    python tests/corpus/make_corpus.py --trl DIR --axolotl DIR --unsloth DIR --chujiezheng DIR

DIR is a git repository (a bare snapshot works): files are read with `git show` from
HEAD, so the commit recorded is exactly the one read. Nothing is executed from those
projects: unsloth's templates are Python string literals, read with ast.literal_eval.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECTS = {
    # name: (GitHub repo, license, how to find templates)
    "trl": ("huggingface/trl", "Apache-2.0", "trl/chat_templates/"),
    "axolotl": ("axolotl-ai-cloud/axolotl", "Apache-2.0", "src/axolotl/utils/chat_templates/templates/"),
    "unsloth": ("unslothai/unsloth", "Apache-2.0", "unsloth/chat_templates.py"),
    "chujiezheng": ("chujiezheng/chat_templates", "MIT", "chat_templates/"),
}


def git(directory: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(directory), *args], capture_output=True, text=True, check=True).stdout


def templates_of(name: str, directory: Path) -> dict[str, tuple[str, str]]:
    """template name -> (path in the repository, text)."""
    where = PROJECTS[name][2]
    found: dict[str, tuple[str, str]] = {}
    if where.endswith(".py"):
        tree = ast.parse(git(directory, "show", f"HEAD:{where}"))
        for node in tree.body:
            if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                    and node.targets[0].id.endswith("_template") and not node.targets[0].id.startswith("_")):
                try:
                    text = ast.literal_eval(node.value)
                except ValueError:
                    continue  # built from other templates: those are already in
                if isinstance(text, str) and "{{" in text:
                    found[node.targets[0].id.removesuffix("_template")] = (f"{where}:{node.targets[0].id}", text)
        return found
    for path in git(directory, "ls-tree", "-r", "--name-only", "HEAD", where).split():
        if path.endswith(".jinja"):
            found[Path(path).stem] = (path, git(directory, "show", f"HEAD:{path}"))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name in PROJECTS:
        parser.add_argument(f"--{name}", type=Path, required=True, help=f"a git checkout of {PROJECTS[name][0]}")
    args = parser.parse_args()
    rows = ["name\tsource_repo\tsource_path\tcommit\tsha256\tlicense"]
    for name, (repo, license_, _) in PROJECTS.items():
        directory = getattr(args, name)
        commit = git(directory, "rev-parse", "HEAD").strip()
        out = HERE / "templates" / name
        out.mkdir(parents=True, exist_ok=True)
        for stem, (path, text) in sorted(templates_of(name, directory).items()):
            data = text.encode("utf-8")
            (out / f"{stem}.jinja").write_bytes(data)
            rows.append(f"{name}/{stem}\t{repo}\t{path}\t{commit}\t{hashlib.sha256(data).hexdigest()}\t{license_}")
    (HERE / "MANIFEST.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    print(f"{len(rows) - 1} templates")


if __name__ == "__main__":
    main()
