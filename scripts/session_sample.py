"""Sessions of random specs on one device for a while: the session property's long mode
(tests/property/test_session.py) where it runs in one process and for a time, not a count, as
on a lent GPU machine whose time is short.

    python3 scripts/session_sample.py --device cuda --seed0 40000 --seconds 240

Prints each failure (seed, error, spec) as it happens, then one summary line.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "property")]

import torch  # noqa: E402

import session  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--seed0", type=int, default=0)
    ap.add_argument("--seconds", type=float, default=300, help="start no session after this")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    start, stats = time.time(), session.new_stats()
    end = session.random_sessions(1 << 30, stats, args.seed0, keep_going=True, device=args.device,
                                  report_failure=lambda report: print(report, flush=True),
                                  deadline=start + args.seconds)
    print(f"{session.summary_line(stats, args.seed0, time.time() - start)}; on {args.device}, to seed {end - 1}",
          flush=True)
    return 1 if stats["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
