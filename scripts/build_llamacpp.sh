#!/usr/bin/env bash
# Build llama.cpp once, for measuring SpecViz beside it (scripts/bench_llamacpp.py); never needed by
# the app, the tests or CI. Its source comes from PyPI: the llama-cpp-python source package carries
# llama.cpp in vendor/llama.cpp. Built into $SPECVIZ_CACHE/llamacpp (else ~/.cache/specviz/llamacpp):
# llama-bench, llama-simple and llama-speculative-simple, CPU only, no network code. Prints the bin folder.
#
# On a CPU with AMX a native build segfaulted on its first decode (an Intel Xeon, 2026-12-03), so
# there it is built for AVX512 with VNNI and BF16 but without AMX; elsewhere for this CPU (native).
set -euo pipefail
version="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
cache="${SPECVIZ_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/specviz}"
root="$cache/llamacpp/$version"
bin="$root/build/bin"
if [ -x "$bin/llama-speculative-simple" ] && [ -x "$bin/llama-bench" ] && [ -x "$bin/llama-simple" ]; then
  echo "$bin"; exit 0
fi
command -v cmake >/dev/null || { echo "build_llamacpp.sh: needs cmake (apt-get install cmake)" >&2; exit 1; }
mkdir -p "$root"
if [ ! -d "$root/src" ]; then
  downloads="$(mktemp -d)"
  python -m pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
    "llama-cpp-python==$version" -d "$downloads" >&2
  tar -xzf "$downloads"/llama_cpp_python-*.tar.gz -C "$downloads"
  mv "$downloads"/llama_cpp_python-*/vendor/llama.cpp "$root/src"
  rm -rf "$downloads"
fi
if grep -q amx_tile /proc/cpuinfo; then
  isa=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=ON
       -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
else
  isa=(-DGGML_NATIVE=ON)
fi
cmake -S "$root/src" -B "$root/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_SERVER=OFF -DGGML_OPENMP=ON -DBUILD_SHARED_LIBS=OFF "${isa[@]}" >&2
cmake --build "$root/build" --config Release -j "$(nproc)" \
  --target llama-bench llama-simple llama-speculative-simple >&2
echo "$bin"
