from __future__ import annotations

import pytest

from contextfold.compaction.summarizers.base import SummaryRequest
from contextfold.core.anchors import (
    ALL_ANCHOR_TYPES,
    FIRST_TEMPLATE,
    INCREMENTAL_TEMPLATE,
    NA,
    SECTIONS_TEMPLATE,
    Anchor,
    AnchorType,
    build_prompt,
    merge_anchors,
    parse_summary,
    render_anchors,
    render_compaction_message,
)
from contextfold.errors import ConfigError

WELL_FORMED = """## Anchors

### User Intent
Build a REST API server with chi router

### Execution Progress
- Set up project structure
- Implemented routing

### Key Decisions
- Using chi router for performance

### Tried Solutions
- Tried gin: too heavy

### Next Steps
- Add authentication
- Write tests

## Summary
The project uses Go 1.25 with chi router. Main file is cmd/server/main.go.
"""


def contents(parsed_anchors: tuple[Anchor, ...]) -> dict[AnchorType, str]:
    return {a.type: a.content for a in parsed_anchors}


def test_parse_well_formed() -> None:
    p = parse_summary(WELL_FORMED)
    assert [a.type for a in p.anchors] == list(ALL_ANCHOR_TYPES)
    c = contents(p.anchors)
    assert c[AnchorType.USER_INTENT] == "Build a REST API server with chi router"
    assert c[AnchorType.EXECUTION_PROGRESS] == "- Set up project structure\n- Implemented routing"
    assert p.anchors[3].items() == ["Tried gin: too heavy"]
    assert p.anchors[4].items() == ["Add authentication", "Write tests"]
    assert p.summary.startswith("The project uses Go 1.25")
    assert p.problems == ()
    assert p.artifacts == ()


def test_parse_reordered_and_missing() -> None:
    text = "### Next Steps\n- deploy\n\n### User Intent\nship it\n\n## Summary\nshort"
    p = parse_summary(text)
    c = contents(p.anchors)
    assert [a.type for a in p.anchors] == list(ALL_ANCHOR_TYPES)
    assert c[AnchorType.USER_INTENT] == "ship it"
    assert c[AnchorType.NEXT_STEP] == "- deploy"
    assert c[AnchorType.KEY_DECISION] == NA
    assert "missing section: Key Decisions" in p.problems
    assert "missing section: Execution Progress" in p.problems
    assert "missing section: Tried Solutions" in p.problems
    assert p.summary == "short"


def test_parse_bold_numbered_singular_headers() -> None:
    text = (
        "**1. User Intent:** fix the parser\n"
        "**Execution Progress**\n- read code\n"
        "## 3) key decision:\n- use regex\n"
        "### TRIED SOLUTION\n- N/A\n"
        "__Next Step__\n- write tests\n"
        "## summary:\nall good"
    )
    p = parse_summary(text)
    c = contents(p.anchors)
    assert c[AnchorType.USER_INTENT] == "fix the parser"
    assert c[AnchorType.EXECUTION_PROGRESS] == "- read code"
    assert c[AnchorType.KEY_DECISION] == "- use regex"
    assert c[AnchorType.TRIED_SOLUTION] == NA
    assert c[AnchorType.NEXT_STEP] == "- write tests"
    assert p.summary == "all good"
    assert p.problems == ()


def test_parse_garbage_never_raises() -> None:
    for text in ["", "   ", "random words without structure", "#", "###", "```\n```", "\x00\x01"]:
        p = parse_summary(text)
        assert len(p.anchors) == 5
        assert all(a.content == NA for a in p.anchors)
        assert p.problems, text
    p = parse_summary("the model ignored the format")
    assert p.summary == "the model ignored the format"
    assert any("no recognizable sections" in x for x in p.problems)


def test_parse_chinese_content() -> None:
    text = WELL_FORMED.replace(
        "Build a REST API server with chi router", "用 chi 路由构建 REST API 服务"
    ).replace("- Tried gin: too heavy", "- 尝试 gin：太重")
    p = parse_summary(text)
    c = contents(p.anchors)
    assert c[AnchorType.USER_INTENT] == "用 chi 路由构建 REST API 服务"
    assert p.anchors[3].items() == ["尝试 gin：太重"]


def test_parse_sections_style() -> None:
    text = (
        "## SESSION INTENT\nMigrate the db\n\n## SUMMARY\nRan migrations.\n\n"
        "## ARTIFACTS\n- db/schema.sql\n- migrate.py\n\n## NEXT STEPS\n- run tests"
    )
    p = parse_summary(text)
    c = contents(p.anchors)
    assert c[AnchorType.USER_INTENT] == "Migrate the db"
    assert c[AnchorType.NEXT_STEP] == "- run tests"
    assert p.summary == "Ran migrations."
    assert p.artifacts == ("db/schema.sql", "migrate.py")
    assert p.problems == ()


def test_parse_code_fence_and_unknown_subheaders_stay_in_body() -> None:
    text = "```markdown\n" + WELL_FORMED + "### Details\nmore text\n```"
    p = parse_summary(text)
    assert p.summary.endswith("### Details\nmore text")
    assert p.problems == ()


def test_merge_union_and_order() -> None:
    old = [
        Anchor(type=AnchorType.USER_INTENT, content="old intent"),
        Anchor(type=AnchorType.EXECUTION_PROGRESS, content="- a\n- b"),
        Anchor(type=AnchorType.KEY_DECISION, content="- use X"),
        Anchor(type=AnchorType.TRIED_SOLUTION, content="- tried Y: failed"),
        Anchor(type=AnchorType.NEXT_STEP, content="- do b\n- do c"),
    ]
    new = [  # reversed order, partly empty, with near-duplicates
        Anchor(type=AnchorType.NEXT_STEP, content="- do d"),
        Anchor(type=AnchorType.TRIED_SOLUTION, content=NA),
        Anchor(type=AnchorType.KEY_DECISION, content="- USE  x\n- keep Z"),
        Anchor(type=AnchorType.EXECUTION_PROGRESS, content="- b\n- c"),
    ]
    merged = merge_anchors(old, new)
    assert [a.type for a in merged] == list(ALL_ANCHOR_TYPES)
    c = contents(merged)
    assert c[AnchorType.USER_INTENT] == "old intent"  # new is missing -> kept
    assert c[AnchorType.EXECUTION_PROGRESS] == "- a\n- b\n- c"
    assert c[AnchorType.KEY_DECISION] == "- use X\n- keep Z"
    assert c[AnchorType.TRIED_SOLUTION] == "- tried Y: failed"
    assert c[AnchorType.NEXT_STEP] == "- do d"  # replaced, not unioned

    merged2 = merge_anchors(merged, [Anchor(type=AnchorType.USER_INTENT, content="refined")])
    assert contents(merged2)[AnchorType.USER_INTENT] == "refined"
    assert contents(merged2)[AnchorType.NEXT_STEP] == "- do d"
    empty = merge_anchors([], [])
    assert [a.content for a in empty] == [NA] * 5


def test_render_round_trip() -> None:
    anchors = (
        Anchor(type=AnchorType.USER_INTENT, content="Fix bug #12 in `parser.py`"),
        Anchor(type=AnchorType.EXECUTION_PROGRESS, content="- read parser.py\n- ran pytest"),
        Anchor(type=AnchorType.KEY_DECISION, content="- keep regex: faster"),
        Anchor(type=AnchorType.TRIED_SOLUTION, content=NA),
        Anchor(type=AnchorType.NEXT_STEP, content="- add test {x}"),
    )
    text = render_anchors(anchors, "Summary with {braces} and 中文.")
    p = parse_summary(text)
    assert p.anchors == anchors
    assert p.summary == "Summary with {braces} and 中文."
    assert p.problems == ()
    assert parse_summary(render_anchors(anchors, "")).summary == ""


SEED_48 = """[Context Compaction]
## Anchors

### User Intent
Build a REST API server with chi router

### Execution Progress
- Set up project structure
- Implemented routing

### Key Decisions
- Using chi router for performance

### Tried Solutions
- Tried gin: too heavy

### Next Steps
- Add authentication
- Write tests

## Summary
The project uses Go 1.25 with chi router. Main file is cmd/server/main.go.

## Offloaded References
- .harness9/tool_results/sess1/tc_001.txt (5000 lines, 128 KB) - tool result of bash

## Active Tasks
[>] Set up middleware
[ ] Add health endpoint

---"""


def test_compaction_message_golden() -> None:
    p = parse_summary(WELL_FORMED)
    msg = render_compaction_message(
        p.anchors,
        p.summary,
        offloaded=[
            (".harness9/tool_results/sess1/tc_001.txt", "5000 lines, 128 KB - tool result of bash")
        ],
        active_tasks=["[>] Set up middleware", "[ ] Add health endpoint"],
    )
    assert msg == SEED_48


def test_compaction_message_optional_sections() -> None:
    p = parse_summary(WELL_FORMED)
    bare = render_compaction_message(p.anchors, p.summary)
    assert bare.startswith("[Context Compaction]\n## Anchors")
    assert "## Offloaded References" not in bare
    assert "## Active Tasks" not in bare
    assert "## Recallable Evidence" not in bare
    assert bare.endswith("---")
    full = render_compaction_message(
        p.anchors, p.summary, recall=["ev-3: pytest failure trace"], note="History was compacted."
    )
    assert "## Recallable Evidence\n- ev-3: pytest failure trace\n" in full
    assert "`recall` tool" in full
    assert full.endswith("---\nHistory was compacted.")
    # the message still parses back into the same anchors
    assert parse_summary(full).anchors == p.anchors


def test_build_prompt_choices() -> None:
    transcript = "[user]: hi {previous} {messages} {x}"
    first = build_prompt(SummaryRequest(messages=()), transcript)
    assert first == FIRST_TEMPLATE.replace("{messages}", transcript)
    inc = build_prompt(SummaryRequest(messages=(), previous_summary="OLD {messages}"), transcript)
    assert "<previous-compaction>\nOLD {messages}\n</previous-compaction>" in inc
    assert inc.startswith(INCREMENTAL_TEMPLATE.split("{previous}")[0])
    assert transcript in inc
    sec = build_prompt(SummaryRequest(messages=(), style="sections"), transcript)
    assert sec == SECTIONS_TEMPLATE.replace("{messages}", transcript)
    assert "SESSION INTENT" in sec and "NEXT STEPS" in sec
    sec_inc = build_prompt(
        SummaryRequest(messages=(), style="sections", previous_summary="PREV"), transcript
    )
    assert "PREV" in sec_inc and transcript in sec_inc
    custom = build_prompt(
        SummaryRequest(messages=(), prompt="Sum up: {messages} / {previous}", previous_summary="P"),
        "T",
    )
    assert custom == "Sum up: T / P"


def test_build_prompt_rejects_prompt_without_placeholder() -> None:
    with pytest.raises(ConfigError, match="messages"):
        build_prompt(SummaryRequest(messages=(), prompt="Summarize this"), "x")


def test_templates_have_placeholders() -> None:
    for t in (FIRST_TEMPLATE, INCREMENTAL_TEMPLATE, SECTIONS_TEMPLATE):
        assert t.count("{messages}") == 1
    assert INCREMENTAL_TEMPLATE.count("{previous}") == 1
    for header in ("### User Intent", "### Key Decisions", "### Next Steps", "## Summary"):
        assert header in FIRST_TEMPLATE and header in INCREMENTAL_TEMPLATE
