#!/usr/bin/env bash
# Creates .venv (once) with torch 2.13.0, snfc (editable) and the test tools. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
stamp=.venv/.snfc-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    .venv/bin/python -m pip install -q --upgrade pip >/dev/null
    # torch first and pinned: an unpinned torch would pull a multi-GB CUDA build.
    .venv/bin/python -m pip install -q "torch==2.13.0"
    .venv/bin/python -m pip install -q -e ".[test]"
    touch "$stamp"
fi
