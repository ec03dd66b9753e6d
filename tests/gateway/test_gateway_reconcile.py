"""How a request is matched with the stored conversation by content (``reconcile.plan``), on
the shapes real clients send."""

from __future__ import annotations

from contextfold.gateway.reconcile import common_prefix, plan


def test_an_append_is_the_common_case() -> None:
    p = plan(["s", "u1", "a1"], ["s", "u1", "a1", "u2"], newest_user=1)
    assert p.kind == "append" and p.kept == 3 and not p.dropped


def test_aider_moves_its_files_block_and_resends_the_last_turn_without_the_reminder() -> None:
    stored = ["s", "ex", "ok", "files1", "reply", "u1+rem", "a1"]
    request = ["s", "ex", "ok", "u1", "a1", "files2", "reply", "u2+rem"]
    p = plan(stored, request, newest_user=5)
    assert p.kind == "rewrite" and p.kept == 3
    assert p.dropped == [3, 4, 5, 6]  # the old block, the turn as sent last time


def test_aider_summary_of_old_turns() -> None:
    stored = ["s", "ex", "ok", "u1", "a1", "u2", "a2", "files", "reply", "u3+rem", "a3"]
    request = ["s", "ex", "ok", "summary", "u2", "a2", "u3", "a3", "files", "reply", "u4+rem"]
    p = plan(stored, request, newest_user=9)
    assert p.kind == "rewrite" and p.kept == 3 and p.dropped == list(range(3, 11))


def test_identical_replies_match_the_earliest() -> None:
    # aider's many "Ok." answers: the request's order is kept
    stored = ["s", "u1", "ok", "u2", "ok", "files", "ok", "u3", "a3"]
    request = ["s", "u1", "ok", "u2", "ok", "u3", "a3", "files", "ok", "u4"]
    p = plan(stored, request, newest_user=7)
    assert p.kind == "rewrite" and p.matched == [0, 1, 2, 3, 4, 7, 8]
    assert p.dropped == [5, 6]


def test_a_regenerated_answer_forks() -> None:
    stored = ["s", "u1", "a1", "u2", "a2"]
    assert plan(stored, ["s", "u1", "a1", "u2"], newest_user=3).kind == "fork"
    p = plan(stored, ["s", "u1", "a1", "u2", "a2-other", "u3"], newest_user=3)
    assert p.kind == "fork" and p.common == 4


def test_the_clients_own_compaction_continues() -> None:
    stored = ["s", "u1", "a1", "u2", "a2"]
    assert plan(stored, ["s", "summary", "u3"], newest_user=3).kind == "rewrite"
    assert plan(stored, ["s", "u1", "summary", "u3"], newest_user=3).kind == "rewrite"


def test_a_line_an_earlier_rewrite_took_out_comes_back_as_a_fork() -> None:
    stored = ["s", "u1", "y1", "ay1"]  # the session shows line y; line x was retracted
    p = plan(stored, ["s", "u1", "x1", "ax1", "x2"], newest_user=2, retracted={"x1", "ax1"})
    assert p.kind == "fork" and p.common == 2


def test_a_changed_reminder_in_an_old_message() -> None:
    stored = ["s", "u1", "a1", "u2+r", "call", "result", "a2"]
    request = ["s", "u1", "a1", "u2", "call", "result", "a2", "u3+r"]
    p = plan(stored, request, newest_user=3)
    assert p.kind == "rewrite" and p.kept == 3 and p.dropped == [3, 4, 5, 6]


def test_common_prefix_of_long_histories_finds_the_first_difference_at_any_place() -> None:
    stored = [f"fp{i}" for i in range(3000)]
    assert common_prefix(stored, [*stored, "new"]) == 3000
    assert common_prefix(stored, stored[:1234]) == 1234
    for at in (0, 1, 511, 512, 513, 2047, 2999):
        request = list(stored)
        request[at] = "rewritten"
        assert common_prefix(stored, request) == at
        assert common_prefix(tuple(stored), tuple(request)) == at  # not lists: one at a time
    assert list(plan(stored, [*stored, "u"], newest_user=-1).matched) == list(range(3000))
