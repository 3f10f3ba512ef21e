#!/usr/bin/env bash
# The full test suite: set up, then pytest (slow tests included).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -q "$@"
