"""PostgreSQL outages through ContextManager, on a private server this script starts (initdb
into a temporary folder, its own port; needs the PostgreSQL binaries and, as root, the
``postgres`` user): ``pg_ctl stop -m immediate`` during a session, then start again.

Prints, per trial: the time to the StorageError of the first call after the stop (it waits for
a pooled connection up to the store timeout), of the next call (the server is known to be down:
one refused connection), and after the restart the time of the first call (which works, with
the session exactly as stored).

    python -m benchmarks.pg_outage [--trials 5] [--timeout 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

from tests.support.pg_private import PrivatePostgres

from contextfold import ContextManager
from contextfold.errors import StorageError


def _timed(cm: ContextManager, text: str) -> tuple[float, bool]:
    start = time.monotonic()
    try:
        cm.add({"role": "user", "content": text})
        ok = True
    except StorageError:
        ok = False
    return time.monotonic() - start, ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=5.0, help="the store timeout (s)")
    args = parser.parse_args()
    server = PrivatePostgres()
    server.start()
    rows: list[tuple[float, float, float]] = []
    try:
        url = f"{server.url}?schema=outage&timeout={args.timeout:g}"
        cm = ContextManager(store=url, session_id="s", context_window=50_000)
        for trial in range(args.trials):
            cm.add({"role": "user", "content": f"before {trial}"})
            server.stop()
            first, ok1 = _timed(cm, f"down {trial}")
            second, ok2 = _timed(cm, f"down {trial}")
            assert not ok1 and not ok2
            server.start()
            back, ok3 = _timed(cm, f"down {trial}")
            assert ok3
            rows.append((first, second, back))
            print(
                f"trial {trial}: first error {first:.2f} s, next {second * 1000:.1f} ms, "
                f"first call after the restart {back * 1000:.1f} ms"
            )
        texts = [m.text for m in cm.history]
        assert len(texts) == len(set(texts)) == 2 * args.trials
        cm.close()
    finally:
        server.destroy()
    for name, i in (("first error", 0), ("next error", 1), ("after restart", 2)):
        values = [r[i] for r in rows]
        print(
            f"{name}: median {statistics.median(values) * 1000:.1f} ms, "
            f"max {max(values) * 1000:.1f} ms"
        )


if __name__ == "__main__":
    main()
