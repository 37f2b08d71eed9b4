"""Precision of every rule on real data other projects publish (see tests/corpus/judge.py).

    python bench/precision.py [UPSTREAM_DIR]

Prints, per rule: findings, how many are judged true / false / not judged, on how many
targets it fired and on how many it stayed silent.
"""

import runpy
from pathlib import Path

if __name__ == "__main__":
    runpy.run_path(str(Path(__file__).resolve().parent.parent / "tests" / "corpus" / "judge.py"), run_name="__main__")
