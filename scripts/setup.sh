#!/usr/bin/env bash
# Create or reuse .venv in the repository and install ssr-sglang with its test and benchmark extras.
# Idempotent: the install runs again only when pyproject.toml or ssr_sglang_cpu.pth changed (or the venv is missing).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.ssr-sglang-installed
want=$(cat pyproject.toml ssr_sglang_cpu.pth | sha256sum | cut -d' ' -f1)  # the .pth is copied at install
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ] || ! .venv/bin/python -c "import ssr_sglang, sglang" 2>/dev/null; then
  echo "== installing ssr-sglang and SGLang 0.5.23 into .venv (first time: several minutes, ~11 GB)"
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e ".[test,bench]"
  echo "$want" > "$stamp"
fi
