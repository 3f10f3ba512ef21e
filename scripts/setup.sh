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
    echo "setting up .venv (torch 2.13.0, snfc, test tools); log in .venv/install.log" >&2
    exec 3>&2  # the steps' names reach the terminal; pip's output goes to the log
    {
        echo "  upgrading pip" >&3
        .venv/bin/python -m pip install --upgrade pip
        # torch first and pinned: an unpinned torch would pull a multi-GB CUDA build.
        echo "  installing torch 2.13.0 (the largest download: a minute or more)" >&3
        .venv/bin/python -m pip install "torch==2.13.0"
        echo "  installing snfc (editable) and the test tools (transformers, pytest, ...)" >&3
        .venv/bin/python -m pip install -e ".[test]"
    } > .venv/install.log 2>&1 || { tail -n 40 .venv/install.log >&2; exit 1; }
    touch "$stamp"
fi
