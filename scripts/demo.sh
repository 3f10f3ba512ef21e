#!/usr/bin/env bash
# The main job: set up, compile every spec in specs/, then train and sample the generated modules.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/snfc check specs
.venv/bin/snfc compile specs/*.snf
exec .venv/bin/python -m snf.quickstart "$@"
