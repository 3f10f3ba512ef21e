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

import runner  # noqa: E402
import session  # noqa: E402
import specgen  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--seed0", type=int, default=0)
    ap.add_argument("--seconds", type=float, default=300, help="start no session after this")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    start, seed = time.time(), args.seed0
    stats = dict.fromkeys(("sessions", "rejected", "failures", "calls", "graphs"), 0)
    while time.time() - start < args.seconds:
        spec = specgen.build(specgen.RandomChooser(seed))
        try:
            out = session.run_session(spec.text, spec, seed, calls=6, whole_training=seed % 3 == 0,
                                      device=args.device)
        except runner.Unsound as err:
            stats["failures"] += 1
            print(f"a session broke (seed {seed}): {err}\n--- spec ---\n{spec.text}", flush=True)
        else:
            if out.accepted:
                stats["sessions"] += 1
                stats["calls"] += out.calls
                stats["graphs"] += sum(out.graphs.values())
            else:
                stats["rejected"] += 1
        finally:
            torch._dynamo.reset()
        seed += 1
    print(f"{args.device} seeds {args.seed0}..{seed - 1}: {stats['sessions']} sessions of random specs, "
          f"{stats['failures']} failures ({stats['calls']} calls compared compiled against eager, "
          f"{stats['rejected']} specs rejected, {stats['graphs']} graphs compiled) in {time.time() - start:.0f} s",
          flush=True)
    return 1 if stats["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
