"""Metric definitions of the replay benchmark on hand-checkable cases."""

from __future__ import annotations

from typing import Any

import pytest

from contextfold.bench.metrics import (
    TokenCounter,
    cached_prefix_tokens,
    call_cost,
    edited_files,
    is_extension,
    named_share,
    percentile,
    short_name,
    tool_call_edits,
)


@pytest.fixture(scope="module")
def tc() -> TokenCounter:
    return TokenCounter()


def msg(role: str, content: str, **kw: Any) -> dict[str, Any]:
    return {"role": role, "content": content, **kw}


def test_exact_o200k_counts(tc: TokenCounter) -> None:
    assert tc.encode("hello world") == [24912, 2375]
    assert tc.count("hello world") == 2
    assert tc.count("") == 0
    # 4 framing tokens per message, plus the tool call's name and arguments
    assert tc.message(msg("user", "hello world")) == 6
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    with_call = {"role": "assistant", "content": "hello world", "tool_calls": [call]}
    try:
        from contextfold.core.tokens import TOOL_CALL_OVERHEAD
    except ImportError:  # the library's message counting is not there: 4 + text + name/args
        assert tc.message(with_call) == 6 + tc.count("bash") + tc.count("{}")
    else:
        expected = 6 + TOOL_CALL_OVERHEAD + tc.count("c1") + tc.count("bash") + tc.count("{}")
        assert tc.message(with_call) == expected


def test_long_text_is_chunked_not_refused(tc: TokenCounter) -> None:
    text = "line of text number 1234\n" * 30_000  # 750K chars, > the 200K-token chunk limit
    n = tc.count(text)
    assert n == 30_000 * tc.count("line of text number 1234\n")


def test_cached_prefix_whole_messages(tc: TokenCounter) -> None:
    a = msg("system", "You are a helpful assistant.")
    b = msg("user", "Fix the bug in parser.py please.")
    c = msg("assistant", "Looking at it now.")
    assert cached_prefix_tokens(None, [a, b], tc) == 0
    # the previous view is a prefix: all of it is cached, the new message is not
    assert cached_prefix_tokens([a, b], [a, b, c], tc) == tc.message(a) + tc.message(b)
    # identical views: everything cached
    assert cached_prefix_tokens([a, b, c], [a, b, c], tc) == tc.view([a, b, c])
    # first message differs in role: nothing cached after it
    assert cached_prefix_tokens([b, c], [a, c], tc) == 0
    # a rewrite in the middle breaks the cache from there on
    b2 = msg("user", "Completely different text.")
    got = cached_prefix_tokens([a, b, c], [a, b2, c], tc)
    assert got == tc.message(a) + 4  # framing of the same-role message, no common text


def test_cached_prefix_inside_first_differing_message(tc: TokenCounter) -> None:
    a = msg("system", "sys")
    old = msg("tool", "alpha beta gamma delta", tool_call_id="x")
    new = msg("tool", "alpha beta gamma epsilon", tool_call_id="x")
    got = cached_prefix_tokens([a, old], [a, new], tc)
    # common character prefix "alpha beta gamma " -> its tokens minus one boundary token
    assert got == tc.message(a) + 4 + tc.count("alpha beta gamma ") - 1
    assert got < tc.view([a, new])


def test_call_cost_bills_cached_prefix_at_a_tenth() -> None:
    assert call_cost(100, 0) == 100
    assert call_cost(100, 60) == pytest.approx(46.0)
    assert call_cost(100, 100) == pytest.approx(10.0)


def test_is_extension() -> None:
    a, b, c = msg("user", "a"), msg("assistant", "b"), msg("user", "c")
    assert is_extension(None, [a])
    assert is_extension([a, b], [a, b, c])
    assert not is_extension([a, b], [a, c])
    assert not is_extension([a, b, c], [a, b])


def test_percentile() -> None:
    assert percentile([], 50) == 0.0
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([float(i) for i in range(1, 101)], 95) == 95.0


@pytest.mark.parametrize(
    ("command", "files"),
    [
        ("sed -i 's/a/b/' src/x.py", ["src/x.py"]),
        ("cd /testbed && sed -i.bak -e 's/a/b/' -e 's/c/d/' a.py b.py", ["a.py", "b.py"]),
        ("cat > fix.py << 'EOF'\nprint(1)\nEOF", ["fix.py"]),
        ("cat <<'EOF' > ./docs/index.rst\nTitle\nEOF", ["docs/index.rst"]),
        ("echo 'x = 1' >> conf.py", ["conf.py"]),
        ("printf 'a\\n' | tee -a notes.md", ["notes.md"]),
        ("python -c \"open('out.json', 'w').write('{}')\"", ["out.json"]),
        (
            "python3 - <<EOF\nfrom pathlib import Path\nPath('a/b.txt').write_text('x')\nEOF",
            ["a/b.txt"],
        ),
        ("ls -la > /dev/null 2>&1", []),
        ("grep -rn foo . | head", []),
        ("python test.py 2>&1 | tail -5", []),
        ("create printenv.pl\n", ["printenv.pl"]),
    ],
)
def test_edited_files(command: str, files: list[str]) -> None:
    assert edited_files(command) == files


def test_str_replace_tool_arguments() -> None:
    call = {
        "id": "1",
        "type": "function",
        "function": {
            "name": "str_replace_editor",
            "arguments": '{"command": "str_replace", "path": "/testbed/pkg/mod.py", "old_str": "a", "new_str": "b"}',
        },
    }
    assert tool_call_edits({"role": "assistant", "content": None, "tool_calls": [call]}) == [
        "/testbed/pkg/mod.py"
    ]


def test_named_share_uses_short_names() -> None:
    assert short_name("/testbed/pkg/mod.py") == "pkg/mod.py"
    assert short_name("/testbed/fix.py") == "fix.py"
    assert short_name("a/b/c/d.py") == "c/d.py"
    text = "I edited pkg/mod.py and wrote fix.py"
    assert named_share(["/testbed/pkg/mod.py", "fix.py", "other.py"], text) == (2, 3)
