#!/usr/bin/env bash
# The full test suite: set up, then pytest (slow tests included); `-m "not slow"` is the fast tier
# (docs/ci.md says what each tier runs and costs).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Two workers (pytest-xdist): the slow tests are mostly torch.compile's single-threaded work, so a
# 2-core CI machine runs two at once. SNF_TEST_WORKERS=0 runs in this process.
workers=${SNF_TEST_WORKERS:-2}
options=()
if [ "$workers" != 0 ]; then
    # Tests go out one at a time, the longest first (tests/conftest.py orders them), so the workers
    # finish together: xdist's default hands each worker a block of tests at once.
    options=(-n "$workers" --dist load --maxschedchunk 1)
    # One intra-op thread per worker: torch's OpenMP threads spin while they wait, and two workers of
    # two threads each on two cores ran small eager tests 3-6x slower.
    export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
fi
exec .venv/bin/python -m pytest -q "${options[@]}" "$@"
