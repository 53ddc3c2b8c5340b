#!/usr/bin/env bash
# Set up (idempotent) and run the main job: SSR side by side with plain decoding on the bundled model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m ssr_sglang.main_job "$@"
