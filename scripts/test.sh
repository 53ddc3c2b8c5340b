#!/usr/bin/env bash
# Set up (idempotent) and run the whole test suite, end-to-end tests against real SGLang servers included.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
exec .venv/bin/python -m pytest -q "$@"
