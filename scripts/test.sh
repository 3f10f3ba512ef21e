#!/usr/bin/env bash
# The full test suite: set up, then pytest (slow tests included).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Two workers (pytest-xdist): the slow tests are mostly torch.compile's single-threaded work, so a
# 2-core CI machine runs two at once. SNF_TEST_WORKERS=0 runs in this process.
exec .venv/bin/python -m pytest -q -n "${SNF_TEST_WORKERS:-2}" "$@"
