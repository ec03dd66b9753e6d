"""The HTML report: self-contained, and rendered by a real headless Chromium when present."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path
from typing import Any

import pytest

from contextfold.bench.replay import ReplayConfig, run_replay
from contextfold.bench.report_html import render, write_report
from tests.conftest import trace_files

CHROMIUM = shutil.which("chromium") or (
    "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None
)


@pytest.fixture(scope="module")
def results() -> dict[str, Any]:
    files = trace_files()
    small = tuple(sorted(files, key=lambda p: p.stat().st_size)[:3])
    res = run_replay(
        ReplayConfig(windows=(8_000,), strategies=("raw", "truncate", "mask"), traces=small)
    )
    # a fake contextfold run so tier markers are drawn too
    base = next(r for r in res["runs"] if r["strategy"] == "truncate")
    res["runs"].append(
        {**base, "strategy": "progressive", "events": [[1, "soft"], [3, "full"], [5, "emergency"]]}
    )
    res["meta"]["strategies"].append("progressive")
    res["aggregates"]["8000"]["progressive"] = {"available": False, "reason": "stub"}
    return res


def test_html_is_self_contained(results: dict[str, Any]) -> None:
    page = render(results, [{"window": 8000, "text": "a target", "met": False}])
    assert page.startswith("<!DOCTYPE html>")
    assert not re.search(r"https?://", page), "no network references at all"
    assert not re.search(r"<script|<link|<img|<iframe|@import|url\(", page, re.I)
    # two bar charts, one timeline per trajectory, one billed-tokens timeline per strategy on
    # the longest trajectory
    assert page.count("<svg") == 2 + 3 + 3
    assert "Per strategy" in page
    assert "stroke-dasharray" in page  # the window line
    assert 'fill="#d55e00"' in page  # a "full" tier marker
    assert "a target" in page


def _png_pixels(data: bytes) -> tuple[int, int, bytes]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height = 8, b"", 0, 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    return width, height, zlib.decompress(idat)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
def test_report_renders_in_headless_chromium(results: dict[str, Any], tmp_path: Path) -> None:
    page = write_report(results, tmp_path / "report.html")
    shot = tmp_path / "shot.png"
    cmd = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--window-size=1200,900",
        f"--screenshot={shot}",
        page.resolve().as_uri(),
    ]
    subprocess.run(cmd, capture_output=True, timeout=120, check=False)
    assert shot.is_file(), "chromium wrote no screenshot"
    width, height, raw = _png_pixels(shot.read_bytes())
    assert (width, height) == (1200, 900)
    # a blank page decompresses to a handful of byte values; charts and text give many
    assert len(set(raw)) > 64
