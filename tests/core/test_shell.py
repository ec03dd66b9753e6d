"""Reading shell command lines (core/shell.py): the words and operators as a POSIX shell splits
them; a command without quoting is split without shlex, with the same result."""

from __future__ import annotations

import random
import shlex

from contextfold.core.shell import ShellReader, _tokens, simple_commands


def _shlex(text: str) -> list[str]:
    lex = shlex.shlex(text, posix=True, punctuation_chars=";&|<>()\n")
    lex.whitespace = " \t\r"
    lex.whitespace_split = True
    lex.commenters = ""
    return list(lex)


def test_a_command_without_quoting_splits_as_shlex_splits_it() -> None:
    alphabet = list("ab -./$*=#~;&|<>()\n\t\r\f\x0b_9é\u00a0{}[]!%^@`,?+:")
    rng = random.Random(7)
    for _ in range(20_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        assert _tokens(text) == _shlex(text), repr(text)


def test_quoted_and_escaped_commands_still_go_through_shlex() -> None:
    assert _tokens("echo 'a b' \"c;d\" e\\ f") == ["echo", "a b", "c;d", "e f"]
    assert _tokens("grep -n 'x' file.py && pytest -q 2>&1 | tail") == _shlex(
        "grep -n 'x' file.py && pytest -q 2>&1 | tail"
    )
    # unbalanced quotes: a plain split instead of an error
    assert _tokens("echo 'open") == ["echo", "'open"]


def test_simple_commands_and_the_files_they_touch() -> None:
    cmds = simple_commands("cd /repo && python -m pytest tests -q > out.txt 2>&1; cat out.txt")
    assert [tokens[0] for tokens, _ in cmds] == ["cd", "python", "cat"]
    reader = ShellReader()
    effects = reader.read_call("bash", {"command": "cd /repo && sed -i s/a/b/ /repo/x.py"})
    assert effects.writes == ["x.py"]
