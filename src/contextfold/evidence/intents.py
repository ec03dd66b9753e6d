"""Which user messages ask for evidence from before a compaction.

Three intents, recognized in English and Chinese by hand-written patterns:

* ``explicit_detail``: "what was the exact error earlier?", "输出所有 stack trace"
* ``historical_verification``: "are you sure that's the cause?", "这个判断有证据吗？"
* ``continue_previous_failure``: "keep fixing that error", "按那个错误继续修"

Precision comes first: an injection that was not wanted costs tokens on every turn, a missed
one only means the model has to call the ``recall`` tool itself. So each pattern needs two
signals (a request and what is requested, plus a reference to the past where the words alone
are ambiguous), and requests to build something ("make the logger print the full stack trace")
or to run something anew ("rerun the build and show me the error") never match.
"""

from __future__ import annotations

import re
from enum import Enum


class Intent(str, Enum):
    EXPLICIT_DETAIL = "explicit_detail"
    HISTORICAL_VERIFICATION = "historical_verification"
    CONTINUE_PREVIOUS_FAILURE = "continue_previous_failure"


_I = re.IGNORECASE

# --------------------------------------------------------------------------- English

_EN_NOUN = (
    r"(?:errors?|exceptions?|stack ?traces?|tracebacks?|logs?|outputs?|assertions?|"
    r"error (?:message|text)|messages?|compiler|panics?)"
)
_EN_QUAL = (
    r"(?:exact(?:ly)?|full|complete|entire|whole|raw|original|verbatim|word for word|"
    r"all(?: the)?|every|unabridged)"
)
_EN_PAST = (
    r"(?:earlier|before|previous(?:ly)?|last (?:run|time|failure|attempt)|again|you saw|we saw|"
    r"you got|you found|from the \w+ run|the worker|sub-?agent|this session|left off|"
    r"that (?:run|test|build|failure|error|crash)|when it (?:crashed|failed)|the failing)"
)
_EN_BUILD = re.compile(
    r"^\s*(?:please\s+|can you\s+|could you\s+)?(?:make|add|implement|write|create|change|update|"
    r"configure|modify|set up|build|rerun|re-run|run|execute|refactor|explain)\b",
    _I,
)

_EN_DETAIL = [
    # show/paste/give ... full/exact ... error/output
    re.compile(
        r"\b(?:show|print|paste|post|share|give|dump|restore|recover|bring back|repeat|let me see|list|"
        r"display|can i see|i need|i want|send)\b[^.?!\n]{0,40}?\b"
        + _EN_QUAL
        + r"\b[^.?!\n]{0,30}?\b"
        + _EN_NOUN
        + r"\b",
        _I,
    ),
    # what was/did ... (exact|earlier) ... error/output
    re.compile(
        r"\bwhat (?:exactly )?(?:was|were|did)\b[^?\n]{0,60}?\b"
        + _EN_NOUN
        + r"\b[^?\n]*?(?:"
        + _EN_QUAL
        + r"|"
        + _EN_PAST
        + r")",
        _I,
    ),
    re.compile(
        r"\bwhat (?:exactly )?(?:was|were|did)\b[^?\n]{0,40}?\b"
        + _EN_QUAL
        + r"\b[^?\n]{0,40}?\b"
        + _EN_NOUN
        + r"\b",
        _I,
    ),
    re.compile(r"\bwhat exactly did\b[^?\n]{0,60}\b(?:complain|say|print|report)", _I),
    # restore/recover the ... logs
    re.compile(
        r"\b(?:restore|recover|bring back|retrieve|dig up)\s+(?:the|that|those|all|every|its|their)"
        r"\b[^.?!\n]{0,40}?\b" + _EN_NOUN + r"\b",
        _I,
    ),
    # show me that / the earlier ... traceback
    re.compile(
        r"\b(?:show|print|paste|post|share|give|dump|repeat|let me see|display|can i see|send)\b"
        r"[^.?!\n]{0,20}?\b(?:that|those|the earlier|the previous|the last|the original|the old)\b"
        r"[^.?!\n]{0,20}?\b" + _EN_NOUN + r"\b",
        _I,
    ),
    # what error did we get earlier
    re.compile(r"\bwhat (?:kind of )?" + _EN_NOUN + r" (?:did|was|were)\b[^?\n]*?" + _EN_PAST, _I),
]

# asking for one run among several, or for a file as it was read (issue 11)
_EN_ORDINAL = (
    r"(?:the )?(?:first|second|third|fourth|fifth|\d+(?:st|nd|rd|th)|last|latest|previous|prior|"
    r"earlier|original|initial|penultimate)\s+(?:(?:failing|failed|broken|crashing|test|pytest)\s+)?"
    r"(?:run|time|attempt|try|execution|output|result|one|read)s?\b|\b(?:the )?(?:run|time|one) before (?:the )?last\b|"
    r"\bbefore (?:the |my |your |our )?(?:fix|fixing|change|patch|edit)\b"
)
_EN_DETAIL += [
    # what was the error of the first failing run / the traceback of the run before the fix
    re.compile(
        r"\bwhat (?:exactly )?(?:was|were|did)\b[^?\n]{0,60}?\b"
        + _EN_NOUN
        + r"\b[^?\n]{0,40}?(?:"
        + _EN_ORDINAL
        + ")",
        _I,
    ),
    re.compile(
        r"\b(?:show|print|paste|post|give|display|send|let me see|can i see|restore|recover|"
        r"bring back)\b(?:[^.?!\n]|\.(?=\S)){0,80}?\b(?:" + _EN_ORDINAL + ")",
        _I,
    ),
    re.compile(
        r"\bwhat (?:did|was|were)\b[^?\n]{0,100}?\b(?:print|output|say|show|return|report|"
        r"give|look like|contain)\w*\b[^?\n]{0,40}?(?:" + _EN_ORDINAL + ")",
        _I,
    ),
    re.compile(
        r"\b(?:show|print|paste|give|display|let me see|can i see)\b(?:[^.?!\n]|\.(?=\S)){0,80}?"
        r"\bas (?:you|we|it) (?:read|saw|showed|printed|viewed|opened|was)\b",
        _I,
    ),
]

# an output asked for by what it was, in the past tense: "what was in views.py when you looked
# at it?", "what did running reproduce.py print?", "what did the grep for X show?", "what were
# the test results of ...?" (issue 22)
_EN_DETAIL += [
    re.compile(
        r"\bwhat (?:was|were) in\b[^?\n]{1,80}?\bwhen (?:you|we) (?:looked at|read|opened|viewed)\b",
        _I,
    ),
    re.compile(
        r"\bwhat did (?:running|the (?:run|execution) of)\s+\S+[^?\n]{0,40}?\b(?:print|output|"
        r"say|show|return|report)\b",
        _I,
    ),
    re.compile(
        r"\bwhat did the (?:grep|search|find)\b[^?\n]{0,80}?\b(?:show|find|return|print|give)\b",
        _I,
    ),
    re.compile(r"\bwhat were the test results\b", _I),
]

_EN_VERIFY = [
    re.compile(
        r"\bare you (?:really |absolutely |completely |100% )?(?:sure|certain|confident|positive)\b"
        r"(?!\s+(?:you|to|we)\b)",
        _I,
    ),
    re.compile(
        r"\b(?:any|what|where(?:'s| is) the|show me the|is there(?: any)?|do you have(?: any)?|"
        r"got any)\s+(?:evidence|proof)\b",
        _I,
    ),
    re.compile(r"\bhow (?:do|can|did|would) you (?:know|be sure|tell|conclude)\b", _I),
    re.compile(r"\bhow (?:sure|certain|confident) are you\b", _I),
    re.compile(r"\bwhat(?:'s| is| was) (?:your|the) (?:evidence|proof|basis)\b", _I),
    re.compile(
        r"\b(?:is|was) (?:that|this|it) (?:really|actually|definitely|truly) (?:the|a) "
        r"(?:root )?(?:cause|reason|problem|issue|culprit)\b",
        _I,
    ),
    re.compile(r"\bback (?:that|this|it)(?: claim)? up\b|\bback up (?:that|this|your) claim", _I),
    re.compile(r"\bwhere did you (?:see|find|get|read) (?:that|this)\b", _I),
    re.compile(r"\bwhat makes you (?:think|say|believe|so sure)\b", _I),
    re.compile(
        r"\b(?:is|was) (?:that|this|your) (?:conclusion|claim|diagnosis|assumption|judge?ment|"
        r"analysis)\b[^?\n]{0,20}\b(?:supported|based|backed|grounded)\b",
        _I,
    ),
    re.compile(
        r"\bwhat (?:is|was) (?:that|this|your) (?:conclusion|claim|diagnosis|analysis)\s+based on",
        _I,
    ),
    re.compile(r"\bcan you prove (?:that|it|this)\b", _I),
    re.compile(
        r"\bdid (?:the [\w-]+ |it |that |this |you )?(?:really|actually) (?:fail|break|crash|see|"
        r"pass|happen)",
        _I,
    ),
]

_EN_CONT_VERB = (
    r"(?:continue|keep(?: on)?|resume|carry on|go on|keep going|pick up|go back to|get back to|"
    r"back to|return to|follow up on|based on|fix|work on|proceed)"
)
_EN_FAIL = (
    r"(?:errors?|failures?|failing (?:tests?|builds?)|test failures?|crash(?:es)?|exceptions?|"
    r"tracebacks?|stack ?traces?|bugs?|build failures?|panics?|failed tests?|debugging|"
    r"investigation)"
)
_EN_REF = (
    r"(?:that|those|the previous|previous|earlier|the last|last|the same|same|the original|"
    r"original|from before|as before|before|we saw|you saw|you found|from earlier|left off)"
)
_EN_CONTINUE = [
    re.compile(
        r"\b"
        + _EN_CONT_VERB
        + r"\b[^.?!\n]{0,50}?\b"
        + _EN_REF
        + r"\b[^.?!\n]{0,30}?\b"
        + _EN_FAIL
        + r"\b",
        _I,
    ),
    re.compile(
        r"\b"
        + _EN_CONT_VERB
        + r"\b[^.?!\n]{0,50}?\b"
        + _EN_FAIL
        + r"\b[^.?!\n]{0,30}?\b"
        + _EN_REF
        + r"\b",
        _I,
    ),
    re.compile(
        r"\b(?:keep|continue|carry on|resume|go on)\s+(?:with\s+)?(?:fixing|debugging|"
        r"troubleshooting|investigating|digging)\b",
        _I,
    ),
]

# --------------------------------------------------------------------------- Chinese

_ZH_PAST = r"(?:刚才|刚刚|之前|上次|上一次|前面|那次|先前|早先|此前|那个|前边)"
_ZH_NOUN = (
    r"(?:报错|报的错|错误信息|错误|日志|输出|堆栈(?:信息)?|调用栈|stack ?trace|traceback|"
    r"异常(?:信息)?|测试结果)"
)
_ZH_QUAL = r"(?:完整|具体|原始|全部|所有|详细|原文|原本)"
_ZH_ASK = r"(?:贴|给我|发我|恢复|找回|调出|打印|列出|显示|看一下|看看|是什么|是啥|再给|什么)"

_ZH_DETAIL = [
    re.compile(
        _ZH_PAST + r".{0,20}?" + _ZH_NOUN + r".{0,12}?(?:" + _ZH_ASK + r"|" + _ZH_QUAL + ")", _I
    ),
    re.compile(_ZH_PAST + r".{0,20}?" + _ZH_QUAL + r".{0,6}?" + _ZH_NOUN, _I),
    re.compile(
        r"(?:输出|打印|列出|显示|贴出|给出)(?:一下)?(?:所有|全部|完整)的?\s*"
        r"(?:stack ?traces?|tracebacks?|堆栈(?:信息)?|调用栈|报错|错误信息|异常信息)",
        _I,
    ),
    re.compile(_ZH_NOUN + r".{0,10}?(?:恢复|找回|调出)", _I),
    re.compile(r"(?:恢复|找回|调出)(?:一下)?.{0,20}?" + _ZH_NOUN, _I),
]

_ZH_DETAIL += [
    re.compile(
        r"(?:第[一二两三四五六七八九十\d]+次|上一次|上次|最后一次|最近一次|倒数第[一二三\d]次|首次|"
        r"修复(?:之|以)?前|修改(?:之|以)?前|改(?:之|以)?前).{0,30}?(?:输出|报错|结果|内容|错误|日志)"
    ),
    re.compile(r"(?:之前|刚才|上次|当时)?读到的.{0,60}?(?:内容|输出)"),
]

_ZH_DETAIL += [
    re.compile(r"看.{1,60}?的时候里面(?:是什么|有什么)"),
    re.compile(r"(?:运行|执行|跑).{1,60}?(?:输出了什么|打印了什么|报了什么)"),
    re.compile(r"(?:搜索|查找).{1,60}?(?:找到了什么|搜到了什么)"),
]

_ZH_VERIFY = [
    re.compile(r"(?:确定|肯定|确认过?)(?:是|吗|这|那|测试|了吗|不是)"),
    re.compile(r"(?:有|有没有|什么|哪些)(?:什么)?(?:证据|依据)|(?:证据|依据)(?:在哪|是什么|呢|吗)"),
    re.compile(r"(?:根据|凭|基于)什么(?:说|判断|认为|得出|断定|确定)|你是根据什么"),
    re.compile(r"(?:怎么|如何|从哪)(?:知道|确定|看出|得出|判断)"),
    re.compile(r"真的是.{0,12}?(?:原因|导致|问题|引起)"),
    re.compile(r"(?:哪里|哪儿)看到"),
    re.compile(r"能(?:证明|证实)|可靠吗|靠谱吗|是猜的|猜的吗|支撑吗|站得住"),
]

_ZH_CONT = r"(?:继续|接着|沿着|顺着|按照|按|根据|基于|针对|回到|还是)"
_ZH_FAIL = r"(?:错误|报错|失败|异常|bug|崩溃|stack ?trace|traceback|错)"
_ZH_REF = r"(?:那个|之前|刚才|刚刚|上次|前面|那次|先前|上一次)"
_ZH_CONTINUE = [
    re.compile(_ZH_CONT + r".{0,6}?" + _ZH_REF + r".{0,10}?" + _ZH_FAIL, _I),
    re.compile(_ZH_REF + r".{0,10}?" + _ZH_FAIL + r".{0,8}?继续", _I),
    re.compile(r"(?:继续|接着)(?:修(?![改订饰正])|排查|调试|debug|定位|查错)", _I),
]


def _any(patterns: list[re.Pattern[str]], text: str) -> bool:
    return any(p.search(text) for p in patterns)


def detect_intent(text: str) -> Intent | None:
    """The evidence intent of a user message, or None for an ordinary request."""
    if not text or not text.strip():
        return None
    t = " ".join(text.split())[:2000]
    if _any(_EN_CONTINUE, t) or _any(_ZH_CONTINUE, t):
        return Intent.CONTINUE_PREVIOUS_FAILURE
    if _any(_EN_VERIFY, t) or _any(_ZH_VERIFY, t):
        return Intent.HISTORICAL_VERIFICATION
    if not _EN_BUILD.search(t) and _any(_EN_DETAIL, t):
        return Intent.EXPLICIT_DETAIL
    if _any(_ZH_DETAIL, t):
        return Intent.EXPLICIT_DETAIL
    return None


__all__ = ["Intent", "detect_intent"]
