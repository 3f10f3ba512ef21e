#!/usr/bin/env bash
# The session property's long mode (docs/ci.md), in resumable chunks of 100 sessions.
#
#   bash scripts/long_sessions.sh run [COMMIT]   start STREAMS processes on a snapshot of COMMIT
#   bash scripts/long_sessions.sh sum            add up the finished chunks' summary lines
#
# Each process runs CHUNKS chunks one after another; a chunk is one pytest process of 100 sessions
# from its own first seed (chunks 200 seeds apart, so that their seeds never overlap), and a
# finished chunk is not run again, so a stopped run resumes where it was. Every chunk runs on the
# snapshot's code, whatever the checkout holds meanwhile; an OUT holds the chunks of one commit.
# Settings (environment): OUT (/tmp/snfc-long), STREAMS (2), CHUNKS (10), SEED0 (23000).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/snfc-long}
STREAMS=${STREAMS:-2}
CHUNKS=${CHUNKS:-10}
SEED0=${SEED0:-23000}
PY=$PWD/.venv/bin/python

run_stream() {  # run_stream SNAPSHOT STREAM
    local tree=$1 stream=$2 i seed log rc
    for ((i = 0; i < CHUNKS; i++)); do
        seed=$((SEED0 + 200 * (stream * CHUNKS + i)))
        log=$OUT/logs/chunk_$seed.log
        [ -f "$log.done" ] && continue
        # an empty inductor cache per chunk: a failure only a cold cache shows (seed 28826) is not hidden
        rm -rf "$OUT/inductor_$seed"
        (cd "$tree" && SNF_SESSION_LONG=1 SNF_SESSION_SEED0=$seed SNF_SESSION_COUNT=100 \
            TORCHINDUCTOR_CACHE_DIR=$OUT/inductor_$seed PYTHONPATH=$tree \
            nice -n 5 "$PY" -m pytest -q -s -p no:cacheprovider tests/property/test_session.py -k random_specs) \
            > "$log" 2>&1 && rc=0 || rc=$?
        rm -rf "$OUT/inductor_$seed"
        # 0: no failure, 1: failures (reported in the log); anything else stopped the chunk: rerun it
        if [ "$rc" -le 1 ]; then touch "$log.done"; else echo "chunk $seed stopped ($rc): $log" >&2; fi
    done
}

case ${1:-} in
run)
    commit=$(git rev-parse "${2:-HEAD}")
    tree=$OUT/tree
    if [ -f "$OUT/commit" ] && [ "$(cat "$OUT/commit")" != "$commit" ]; then
        echo "$OUT holds a run of $(cat "$OUT/commit"); give another OUT for $commit" >&2
        exit 1
    fi
    bash scripts/setup.sh
    mkdir -p "$OUT/logs"
    [ -d "$tree" ] || git worktree add --detach "$tree" "$commit" > /dev/null
    echo "$commit" > "$OUT/commit"
    for ((s = 0; s < STREAMS; s++)); do
        run_stream "$tree" "$s" &
    done
    echo "running $STREAMS x $CHUNKS chunks of 100 sessions on $commit; logs in $OUT/logs" >&2
    wait
    ;;
sum)
    echo "commit $(cat "$OUT/commit")"
    grep -h "^seeds from" "$OUT"/logs/chunk_*.log | sort -t' ' -k3 -n
    grep -h "^seeds from" "$OUT"/logs/chunk_*.log | awk '
        { sessions += $4; failures += $9; seconds += $(NF - 1); chunks++ }
        END { printf "%d chunks: %d sessions, %d failures, %.0f s of process time\n",
              chunks, sessions, failures, seconds }'
    grep -l "a session broke" "$OUT"/logs/chunk_*.log 2>/dev/null | sed 's/^/failure in /' || true
    # a chunk that met many rejected specs could run past the next chunk's first seed
    grep -h "^100 sessions, seeds" "$OUT"/logs/chunk_*.log | tr '.,' '  ' |
        awk '$5 - $4 > 200 { print "seeds overlap: chunk " $4 " ran to seed " $5 }'
    ;;
*)
    sed -n 2,11p "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
