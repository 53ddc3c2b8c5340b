#!/usr/bin/env bash
# Set up (idempotent) and run the tests; the slowest 20 are listed at the end.
#   bash scripts/test.sh           everything, end-to-end tests against real SGLang servers included (CI: .ci/run),
#                                  two test files at a time
#   bash scripts/test.sh --fast    the inner loop: units, properties and one shared end-to-end SSR server (the one
#                                  module marked smoke); nothing marked slow (a few minutes)
# Further arguments go to pytest (a path, -k, -x, ...).
set -euo pipefail
cd "$(dirname "$0")/.."
# The full run spreads test files over two pytest-xdist workers (one file's tests, and so its module-scoped
# servers, stay on one worker), longest file first (tests/conftest.py: LONGEST_FIRST); pass -n 0 to run them
# one at a time.
select=(-n 2 --dist loadfile --no-loadscope-reorder)
if [ "${1:-}" = "--fast" ]; then
  shift
  select=(-m "not slow and (not server or smoke)")
fi
bash scripts/setup.sh
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
exec .venv/bin/python -m pytest -q --durations=20 ${select[@]+"${select[@]}"} "$@"  # (bash < 4.4: no empty-array error)
