"""``make bench``: the replay benchmark at window 32,000 over all traces, the micro-benchmarks,
a headless-Chromium check of the HTML report (when Chromium is installed), then the other
benchmark scripts in this folder that expose ``main(argv)``.

Results go to ``bench-results/`` (``results.json``, ``report.html``, ``report.png``,
``micro.json``); tables are printed. Run: ``python -m benchmarks.run_all [--jobs N]``.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

from benchmarks import micro_prepare  # noqa: E402
from contextfold.bench.cli import main as bench_main  # noqa: E402

OWN = {"__init__", "run_all", "micro_prepare", "cost_curve"}  # cost_curve: a long sweep, on demand


def chromium_check(report: Path, png: Path) -> str:
    """Render the report in headless Chromium; returns a one-line verdict."""
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        return "skipped (chromium not installed: apt-get install -y chromium)"
    with tempfile.TemporaryDirectory(prefix="cf-chromium-") as profile:
        cmd = [
            exe,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            "--window-size=1400,2000",
            f"--screenshot={png}",
            report.resolve().as_uri(),
        ]
        try:
            subprocess.run(cmd, capture_output=True, timeout=180, check=False)
        except subprocess.TimeoutExpired:
            return "FAILED (chromium timed out)"
    if not png.is_file() or png.stat().st_size < 10_000:
        return "FAILED (no or empty screenshot)"
    return f"ok ({png}, {png.stat().st_size:,} bytes)"


def other_benchmarks() -> list[str]:
    names = []
    for path in sorted((ROOT / "benchmarks").glob("*.py")):
        if path.stem in OWN:
            continue
        names.append(path.stem)
    return names


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.run_all")
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="replay worker processes (default 1: parallel workers distort the per-call timings)",
    )
    p.add_argument("--out", default=str(ROOT / "bench-results"))
    p.add_argument("--window", default="32000")
    p.add_argument("--skip-micro", action="store_true")
    p.add_argument(
        "--skip-others", action="store_true", help="only the replay and micro benchmarks"
    )
    args = p.parse_args(argv)
    out = Path(args.out)
    failures: list[str] = []
    t0 = time.perf_counter()
    print(f"== replay benchmark (window {args.window}, all traces, {args.jobs} jobs)", flush=True)
    rc = bench_main(["--window", args.window, "--jobs", str(args.jobs), "--out", str(out)])
    if rc != 0:
        failures.append(f"replay exited {rc}")
    report = out / "report.html"
    if report.is_file():
        verdict = chromium_check(report, out / "report.png")
        print(f"== HTML report in headless Chromium: {verdict}", flush=True)
        if verdict.startswith("FAILED"):
            failures.append("report rendering")
    if not args.skip_micro:
        print("\n== micro-benchmarks", flush=True)
        micro_prepare.run(out)
    if not args.skip_others:
        for name in other_benchmarks():
            try:
                mod = importlib.import_module(f"benchmarks.{name}")
            except Exception as exc:  # someone else's script: report, do not crash the run
                failures.append(f"{name}: import failed: {exc}")
                continue
            entry = getattr(mod, "main", None)
            if not callable(entry):
                continue
            print(f"\n== benchmarks.{name}", flush=True)
            try:
                takes_args = bool(inspect.signature(entry).parameters)
                code = entry([]) if takes_args else entry()
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            except Exception as exc:
                failures.append(f"{name}: {type(exc).__name__}: {exc}")
                continue
            if code:
                failures.append(f"{name} exited {code}")
    print(f"\nall benchmarks: {time.perf_counter() - t0:.0f} s; results in {out}")
    for f in failures:
        print(f"FAILED: {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
