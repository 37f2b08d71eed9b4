#!/usr/bin/env bash
# The probe's GPU evidence in one device session (within 8 minutes on one H100 or H200).
#
# Here, on the development machine, once:
#     bash bench/gpu_session.sh prepare
# copies what the GPU machine lacks into folders .gitignore names: .gpu/upstream (the Qwen3-8B metadata and
# the Qwen3-30B-A3B config from ../shared/upstream, which does not travel) and .whl (minijinja and google-re2
# wheels for its Python 3.12, and the transformers the tests pin; every other dependency is there), 31 MB.
#
# Then, with the device tool, carrying .gpu and .whl:
#     bash bench/gpu_session.sh run
# runs the GPU tests and the GPU bench, printing as it goes and writing each log under $OUT.
#   1. tests/probe/test_probe_gpu.py: the fixtures' verdicts on CUDA with graphs, graphs vs eager tokens,
#      random bf16 weights never failing deterministic at 96 and 512 tokens, the refusal of a too-large model
#   2. bench/bench_probe_gpu.py on the Qwen3-8B shape at the defaults, then without CUDA graphs at 256 tokens
#   3. the Qwen3-30B-A3B shape cut to 12 of its 48 layers, at 512 tokens (the full 61 GB does not fit the
#      disk beside everything else, nor the time)
set -u
cd "$(dirname "$0")/.."
SHARED=${HFDOCTOR_SHARED:-../shared}

version() {
    python3 -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$1"
}

prepare() {
    set -e
    mkdir -p .gpu/upstream/Qwen--Qwen3-8B .gpu/upstream/Qwen--Qwen3-30B-A3B .whl
    cp "$SHARED"/upstream/Qwen--Qwen3-8B/*.json "$SHARED"/upstream/Qwen--Qwen3-8B/*.jinja \
       "$SHARED"/upstream/Qwen--Qwen3-8B/merges.txt .gpu/upstream/Qwen--Qwen3-8B/
    cp "$SHARED"/upstream/Qwen--Qwen3-30B-A3B/config.json .gpu/upstream/Qwen--Qwen3-30B-A3B/
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d .whl "minijinja==$(version minijinja)" "google-re2==$(version google-re2)" \
        "transformers==$(version transformers)"
    du -sh .gpu .whl
    echo "carry: .gpu .whl; command: bash bench/gpu_session.sh run"
}

run() {
    command -v nvidia-smi >/dev/null || { echo "no GPU here: run this on the device machine" >&2; exit 2; }
    export PYTHONUNBUFFERED=1
    OUT=${OUT:-/tmp/gpu-session}
    mkdir -p "$OUT"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .whl/*.whl || exit 1
    export PYTHONPATH="/tmp/site:$PWD"
    # the transformers the tests pin (the machine has its own, older); if it cannot import there, the machine's
    python3 -c "import transformers" 2>/dev/null || rm -rf /tmp/site/transformers /tmp/site/transformers-*
    export HFDOCTOR_TEST_UPSTREAM="$PWD/.gpu/upstream"
    export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/device.txt"
    python3 -c 'import sys, torch, transformers; print(sys.version.split()[0], torch.__version__, transformers.__version__)' \
        | tee -a "$OUT/device.txt"
    date -u +%Y-%m-%dT%H:%MZ | tee -a "$OUT/device.txt"
    set -o pipefail
    timeout 140 python3 -m pytest -q -p no:cacheprovider -p no:xdist tests/probe/test_probe_gpu.py 2>&1 \
        | tee "$OUT/gpu-tests.log"
    timeout 150 python3 bench/bench_probe_gpu.py --models qwen3-8b --work /tmp/bench --keep 2>&1 \
        | grep -v '^hfdoctor probe \[' | tee "$OUT/bench-qwen3-8b.log"
    timeout 60 python3 bench/bench_probe_gpu.py --models qwen3-8b --work /tmp/bench --keep --no-graphs \
        --max-new-tokens 256 2>&1 | grep -v '^hfdoctor probe \[' | tee "$OUT/bench-qwen3-8b-eager.log"
    rm -rf /tmp/bench
    timeout 120 python3 bench/bench_probe_gpu.py --models qwen3-30b-a3b --layers 12 --max-new-tokens 512 \
        --work /tmp/bench 2>&1 \
        | grep -v '^hfdoctor probe \[' | tee "$OUT/bench-qwen3-30b-a3b.log"
}

case "${1:-}" in
    prepare) prepare ;;
    run) run ;;
    *) echo "usage: bash bench/gpu_session.sh prepare|run" >&2; exit 2 ;;
esac
