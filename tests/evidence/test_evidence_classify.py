"""Content types and anchors on realistic outputs of many languages and test runners."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from contextfold.evidence.classify import (
    CONTENT_TYPES,
    classify,
    exit_code,
    extract_anchors,
    link_summary_item,
    normalize_command,
    summary_hints,
)
from contextfold.evidence.model import EvidencePointer
from tests.conftest import load_trace, trace_files

PYTHON_TB = """\
Traceback (most recent call last):
  File "/home/dev/app/src/app/cli.py", line 42, in main
    run(args)
  File "/home/dev/app/src/app/core.py", line 17, in run
    value = int(raw)
ValueError: invalid literal for int() with base 10: 'abc'
"""

JAVA_TB = """\
Exception in thread "main" java.lang.IllegalStateException: queue is closed
\tat com.example.queue.WorkQueue.push(WorkQueue.java:88)
\tat com.example.App.main(App.java:12)
Caused by: java.io.IOException: broken pipe
\tat com.example.net.Conn.write(Conn.java:40)
\t... 2 more
"""

JS_TB = """\
/home/dev/web/src/server.js:14
    throw new TypeError('port must be a number');
    ^

TypeError: port must be a number
    at listen (/home/dev/web/src/server.js:14:11)
    at Object.<anonymous> (/home/dev/web/src/index.js:3:1)
    at Module._compile (node:internal/modules/cjs/loader:1256:14)
"""

GO_PANIC = """\
panic: runtime error: index out of range [5] with length 3

goroutine 1 [running]:
main.pick(...)
\t/home/dev/tool/main.go:21
main.main()
\t/home/dev/tool/main.go:9 +0x1d
exit status 2
"""

RUST_PANIC = """\
   Compiling demo v0.1.0 (/home/dev/demo)
    Finished dev [unoptimized + debuginfo] target(s) in 0.52s
     Running `target/debug/demo`
thread 'main' panicked at src/main.rs:4:5:
called `Option::unwrap()` on a `None` value
note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace
"""

PYTEST_OUT = """\
============================= test session starts ==============================
platform linux -- Python 3.11.7, pytest-8.2.0, pluggy-1.5.0
rootdir: /home/dev/app
collected 12 items

tests/test_parser.py ..F.........                                        [100%]

=================================== FAILURES ===================================
_______________________________ test_parse_empty _______________________________

    def test_parse_empty():
>       assert parse("") == []
E       AssertionError: assert None == []

tests/test_parser.py:31: AssertionError
=========================== short test summary info ============================
FAILED tests/test_parser.py::test_parse_empty - AssertionError: assert None == []
========================= 1 failed, 11 passed in 0.21s =========================
"""

UNITTEST_OUT = """\
..F.
======================================================================
FAIL: test_total (tests.test_cart.CartTest)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "/home/dev/shop/tests/test_cart.py", line 20, in test_total
    self.assertEqual(cart.total(), 30)
AssertionError: 25 != 30

----------------------------------------------------------------------
Ran 4 tests in 0.003s

FAILED (failures=1)
"""

JEST_OUT = """\
 FAIL  src/sum.test.js
  ● sum › adds negative numbers

    expect(received).toBe(expected) // Object.is equality

    Expected: -3
    Received: 3

Test Suites: 1 failed, 1 total
Tests:       1 failed, 2 passed, 3 total
Snapshots:   0 total
Time:        0.512 s
"""

GO_TEST_OUT = """\
=== RUN   TestAdd
--- PASS: TestAdd (0.00s)
=== RUN   TestDivide
    calc_test.go:18: Divide(1, 0) = 0, want error
--- FAIL: TestDivide (0.00s)
FAIL
FAIL\texample.com/calc\t0.004s
"""

CARGO_TEST_OUT = """\
running 2 tests
test tests::adds ... ok
test tests::divides ... FAILED

failures:

---- tests::divides stdout ----
thread 'tests::divides' panicked at src/lib.rs:20:9:
assertion `left == right` failed

failures:
    tests::divides

test result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out
"""

DIFF = """\
diff --git a/src/app/core.py b/src/app/core.py
index 1a2b3c4..5d6e7f8 100644
--- a/src/app/core.py
+++ b/src/app/core.py
@@ -14,7 +14,7 @@ def run(args):
-    value = int(raw)
+    value = int(raw or 0)
"""

CAT_N = """\
     1\timport os
     2\t
     3\tdef main():
     4\t    print(os.getcwd())
     5\t
     6\tif __name__ == "__main__":
     7\t    main()
"""

SOURCE = """\
import json
import re
from pathlib import Path


class Config:
    def __init__(self, path):
        self.path = Path(path)

    def load(self):
        return json.loads(self.path.read_text())
"""

LOG = """\
2024-05-01 10:00:01,123 INFO starting worker pid=412
2024-05-01 10:00:01,456 INFO connected to redis://localhost:6379
2024-05-01 10:00:02,001 WARNING queue lag 1200ms
2024-05-01 10:00:03,777 INFO processed 120 jobs
"""

PLAIN = "total 8\ndrwxr-xr-x  3 dev dev 4096 May  1 10:00 src\n-rw-r--r--  1 dev dev  120 May  1 10:00 setup.cfg\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (PYTHON_TB, {"stack_trace", "error"}),
        (JAVA_TB, {"stack_trace", "error"}),
        (JS_TB, {"stack_trace", "error"}),
        (GO_PANIC, {"stack_trace", "error"}),
        (RUST_PANIC, {"stack_trace", "error"}),
        (PYTEST_OUT, {"test_output", "error"}),
        (UNITTEST_OUT, {"test_output", "stack_trace"}),
        (JEST_OUT, {"test_output"}),
        (GO_TEST_OUT, {"test_output"}),
        (CARGO_TEST_OUT, {"test_output", "stack_trace"}),
        (DIFF, {"diff"}),
        (CAT_N, {"file_content"}),
        (SOURCE, {"file_content"}),
        (LOG, {"log"}),
    ],
    ids=[
        "python",
        "java",
        "js",
        "go",
        "rust",
        "pytest",
        "unittest",
        "jest",
        "gotest",
        "cargo",
        "diff",
        "cat-n",
        "source",
        "log",
    ],
)
def test_classify_formats(text: str, expected: set[str]) -> None:
    types = classify(text)
    assert expected <= set(types), types
    assert list(types) == [t for t in CONTENT_TYPES if t in types]  # canonical order


def test_plain_output_is_command_output() -> None:
    assert classify(PLAIN) == ("command_output",)
    assert classify("") == ("command_output",)
    assert "diff" not in classify(PYTHON_TB) and "test_output" not in classify(DIFF)


def test_exit_codes() -> None:
    assert exit_code("<returncode>1</returncode>\n<output>\n</output>") == 1
    assert exit_code("build done\nProcess exited with code 3") == 3
    assert exit_code("hello") is None
    assert "error" in classify("<returncode>2</returncode>\n<output>\nusage: x\n</output>")


def test_anchors_python() -> None:
    a = extract_anchors(
        "<returncode>1</returncode>\n" + PYTHON_TB, "cd /repo && python -m app.cli x.py"
    )
    assert a[0] == "command:python -m app.cli x.py"
    assert "exit_code:1" in a
    assert "exception:ValueError" in a
    assert "file:/home/dev/app/src/app/core.py:17" in a
    # innermost frame first
    assert a.index("file:/home/dev/app/src/app/core.py:17") < a.index(
        "file:/home/dev/app/src/app/cli.py:42"
    )
    assert "file:x.py" in a


def test_anchors_other_languages() -> None:
    java = extract_anchors(JAVA_TB)
    assert {
        "exception:IllegalStateException",
        "exception:IOException",
        "file:WorkQueue.java:88",
    } <= set(java)
    js = extract_anchors(JS_TB)
    assert {"exception:TypeError", "file:/home/dev/web/src/server.js:14"} <= set(js)
    go = extract_anchors(GO_PANIC)
    assert {"exception:panic", "file:/home/dev/tool/main.go:21", "exit_code:2"} <= set(go)
    rust = extract_anchors(RUST_PANIC)
    assert {"exception:panic", "file:src/main.rs:4"} <= set(rust)


def test_anchors_failing_tests() -> None:
    assert "test:tests/test_parser.py::test_parse_empty" in extract_anchors(PYTEST_OUT)
    assert "file:tests/test_parser.py:31" in extract_anchors(PYTEST_OUT)
    assert "test:tests.test_cart.CartTest.test_total" in extract_anchors(UNITTEST_OUT)
    assert "test:TestDivide" in extract_anchors(GO_TEST_OUT)
    assert "test:TestAdd" not in extract_anchors(GO_TEST_OUT)  # only failures
    assert "test:tests::divides" in extract_anchors(CARGO_TEST_OUT)
    assert "test:sum › adds negative numbers" in extract_anchors(JEST_OUT)


def test_normalize_command() -> None:
    assert normalize_command("cd /testbed && cd src &&  pytest   -x") == "pytest -x"
    assert normalize_command("cd '/a b'; ls") == "ls"
    assert normalize_command("  git status ") == "git status"


def test_huge_text_is_bounded() -> None:
    big = ("x" * 100 + "\n") * 20_000 + PYTHON_TB
    assert "stack_trace" in classify(big)  # the tail is scanned
    assert "exception:ValueError" in extract_anchors(big)


def test_summary_hints_and_linking() -> None:
    hints = summary_hints(
        "Ran `pytest -x tests/test_parser.py`; test_parse_empty fails with AssertionError in "
        "src/parser.py:31"
    )
    assert "cmd:pytest -x tests/test_parser.py" in hints
    assert "test:test_parse_empty" in hints
    assert "exception:AssertionError" in hints
    assert "file:src/parser.py:31" in hints
    p1 = EvidencePointer(
        id="ev-1",
        command="pytest -x tests/test_parser.py",
        anchors=extract_anchors(PYTEST_OUT, "pytest -x tests/test_parser.py"),
    )
    p2 = EvidencePointer(id="ev-2", command="ls", anchors=("command:ls",))
    item = link_summary_item("tried_solution", "`pytest -x tests/test_parser.py` failed", [p1, p2])
    assert item.evidence_ids == ("ev-1",)
    assert item.confidence == 1.0
    loose = link_summary_item("progress", "edited setup.cfg", [p1, p2])
    assert loose.evidence_ids == () and loose.confidence == 0.3


def test_real_trace_outputs() -> None:
    files = trace_files()
    counts: Counter[str] = Counter()
    tracebacks = 0
    for path in files:
        calls: dict[str, str] = {}
        for m in load_trace(path):
            for c in m.get("tool_calls") or []:
                calls[c["id"]] = json.loads(c["function"]["arguments"]).get("command", "")
            if m["role"] != "tool" or not isinstance(m["content"], str):
                continue
            text = m["content"]
            types = classify(text)
            assert types, text[:200]
            counts.update(types)
            anchors = extract_anchors(text, calls.get(m["tool_call_id"]))
            if re.search(r"^Traceback \(most recent call last\)", text, re.M):
                tracebacks += 1
                assert "stack_trace" in types
                assert any(a.startswith("exception:") for a in anchors) or "<warning>" in text
            if text.startswith("diff --git"):
                assert "diff" in types
    assert tracebacks > 50
    for t in ("stack_trace", "error", "test_output", "diff", "file_content", "command_output"):
        assert counts[t] > 0, counts


def test_a_json_command_output_is_read_for_its_exit_code_and_traceback() -> None:
    """mini-swe-agent 2.x sends each observation as a JSON object: the exit code is a field
    and the traceback's lines are escaped inside the output string."""
    output = (
        "run 2 step 00000: compiled ok\nTraceback (most recent call last):\n"
        '  File "run.py", line 21, in <module>\nValueError: run 2 failed: checksum mismatch\n'
    )
    text = json.dumps({"returncode": 1, "output": output}, indent=2)
    anchors = extract_anchors(text, "python3 run.py 2 8")
    assert "exit_code:1" in anchors and "exception:ValueError" in anchors
    assert "file:run.py:21" in anchors
    assert {"stack_trace", "error"} <= set(classify(text))
    ok = json.dumps({"returncode": 0, "output": "all good\n"}, indent=2)
    assert "exit_code:0" in extract_anchors(ok) and "error" not in classify(ok)
    # any other JSON (no exit code field) is read as it is
    other = json.dumps({"items": ["ValueError: x"], "n": 1})
    assert not any(a.startswith("exit_code:") for a in extract_anchors(other))
