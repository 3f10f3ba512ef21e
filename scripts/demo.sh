#!/usr/bin/env bash
# The main job: set up, compile every spec in specs/, then train and sample the generated modules.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
echo "checking specs/ (snfc check)" >&2
.venv/bin/snfc check specs
echo "compiling specs/ to generated/ (snfc compile)" >&2
.venv/bin/snfc compile specs/*.snf
echo "starting the quickstart: importing torch, then each spec in turn; nanogpt, bert and mixtral train (under a minute; --all trains all of them)" >&2
exec .venv/bin/python -m snf.quickstart "$@"
