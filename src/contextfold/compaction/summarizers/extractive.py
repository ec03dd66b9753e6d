"""The extractive summarizer: the default for users without an LLM.

No model, no randomness: it reads the messages and pulls out the task (first user request),
what the agent did (tool calls and their outcomes, files edited), the decisions it stated,
what failed (exit codes, tracebacks, pytest failures) and the plans it announced last. The
output follows the anchors format (or the four sections) and is bounded.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from ...core.anchors import (
    NA,
    Anchor,
    AnchorType,
    is_section_header,
    merge_anchors,
    parse_summary,
    render_anchors,
    union_items,
)
from ...core.messages import Message
from ...core.scaffolding import detect_agent
from .base import SummaryRequest
from .mining import NEXT_RE, decision_score, intent, sentences, user_requests
from .steps import Step, clip, read_steps
from .transcript import render_content

_MARKER = re.compile(r"^\(\+(\d+) earlier actions?.*\)$")


def _cap(items: list[str], n: int, noun: str = "actions") -> list[str]:
    earlier = 0
    rest = []
    for it in items:
        m = _MARKER.match(it)
        if m:
            earlier += int(m.group(1))
        else:
            rest.append(it)
    if len(rest) > n:
        earlier += len(rest) - n
        rest = rest[len(rest) - n :]
    return ([f"(+{earlier} earlier {noun})"] if earlier else []) + rest


class ExtractiveSummarizer:
    """Deterministic, model-free :class:`~contextfold.compaction.summarizers.base.Summarizer`."""

    def __init__(
        self,
        *,
        max_progress: int = 12,
        max_decisions: int = 8,
        max_tried: int = 8,
        max_next: int = 5,
        intent_chars: int = 300,
    ) -> None:
        self.max_progress = max_progress
        self.max_decisions = max_decisions
        self.max_tried = max_tried
        self.max_next = max_next
        self.intent_chars = intent_chars

    def summarize(self, request: SummaryRequest) -> str:
        limit = max(request.max_summary_tokens, 50) * 3
        scale = 1.0
        text = ""
        for _ in range(8):
            text = self._render(request, scale)
            if len(text) <= limit:
                return text
            scale *= 0.6
        return _hard_bound(text, limit, request.style)

    # -- building blocks ------------------------------------------------------------------

    def _progress(self, steps: list[Step], limit: int) -> list[str]:
        items: list[tuple[int, str]] = []
        reads: list[str] = []
        nreads = 0
        last_search = ""

        def flush() -> None:
            nonlocal nreads, last_search
            if nreads:
                shown = ", ".join(reads[:4]) + (
                    f" (+{len(reads) - 4} more)" if len(reads) > 4 else ""
                )
                if reads:
                    item = f"viewed {shown}" + (
                        f" ({nreads} reads/searches)" if nreads > len(reads) else ""
                    )
                else:
                    item = f"searched the code ({nreads}x), last: `{last_search}`"
                items.append((0, item))
            reads.clear()
            nreads, last_search = 0, ""

        prev = ""
        repeat = 1
        for s in steps:
            if s.kind in ("view", "search") and not s.writes:
                nreads += 1
                last_search = s.label if s.kind == "search" else last_search
                reads.extend(r for r in s.reads if r not in reads)
                continue
            flush()
            prio = 1
            if s.writes and not s.failed:
                item = "edited " + ", ".join(s.writes)
                if s.kind == "run":
                    item += f" via `{s.label}`"
                prio = 1 if all(_is_scratch(w) for w in s.writes) else 3
            elif s.kind == "submit":
                item, prio = "submitted the final output", 3
            elif s.kind == "edit" and s.failed:
                continue
            else:
                item = f"ran `{s.label}`" + (f" -> {s.outcome}" if s.outcome else "")
                prio = 2 if s.kind == "test" else 1
            if item == prev:
                repeat += 1
                items[-1] = (prio, f"{item} (x{repeat})")
                continue
            prev, repeat = item, 1
            items.append((prio, item))
        flush()
        if len(items) <= limit:
            return [it for _, it in items]
        recent = min(4, limit)
        head = list(enumerate(items[: len(items) - recent]))
        best = sorted(head, key=lambda x: (-x[1][0], -x[0]))[: limit - recent]
        kept = [it for _, (_, it) in sorted(best)] + [it for _, it in items[len(items) - recent :]]
        return [f"(+{len(items) - len(kept)} earlier actions)", *kept]

    def _tried(self, steps: list[Step]) -> list[str]:
        out: list[str] = []
        for s in steps:
            if s.failed:
                what = f"`{s.label}`" if s.kind != "edit" else f"edit via `{s.label}` rejected"
                out.append(f"{what} -> {s.error}")
        return union_items([], out)

    def _decisions(self, messages: Sequence[Message], limit: int) -> list[str]:
        found: list[tuple[int, int, str]] = []
        idx = 0
        for m in messages:
            if m.role != "assistant":
                continue
            for sent in sentences(render_content(m.content)):
                idx += 1
                score = decision_score(sent)
                if score:
                    found.append((score, idx, clip(sent, 220)))
        uniq: dict[str, tuple[int, int, str]] = {}
        for f in found:
            uniq.setdefault(f[2].casefold()[:70], f)
        best = sorted(uniq.values(), key=lambda f: (-f[0], -f[1]))[:limit]
        return [f[2] for f in sorted(best, key=lambda f: f[1])]

    def _next(self, messages: Sequence[Message], steps: list[Step]) -> list[str]:
        plans: list[str] = []
        for m in reversed(messages):
            if m.role == "assistant" and render_content(m.content).strip():
                plans = [s for s in sentences(render_content(m.content)) if NEXT_RE.search(s)]
                if plans:
                    break
        out = [clip(p, 200) for p in plans[-3:]]
        last: dict[str, Step] = {}
        for s in steps:
            if s.answered and s.kind in ("test", "run"):
                last[s.label] = s
        out += [f"resolve: `{s.label}` still fails ({s.error})" for s in last.values() if s.failed]
        out += [f"awaiting result of `{s.label}`" for s in steps if not s.answered]
        if steps and steps[-1].kind == "submit" and steps[-1].answered:
            out = ["none pending: the final output was submitted"]
        return union_items([], out)

    def _render(self, request: SummaryRequest, scale: float) -> str:
        msgs = [m for m in request.messages if m.role != "system"]
        steps = read_steps(msgs)

        def k(n: int) -> int:
            return max(1, int(n * scale))

        item_chars = max(60, int(220 * scale))
        prev_anchors: Sequence[Anchor] = request.previous_anchors
        prev_summary = request.previous_summary or ""
        if prev_summary and ("## " in prev_summary or "**" in prev_summary):
            parsed = parse_summary(prev_summary)
            prev_anchors = prev_anchors or parsed.anchors
            prev_summary = parsed.summary
        written: list[str] = []
        for s in steps:
            written += [w for w in s.writes if not s.failed and w not in written]
            written += [w for w in s.diff_files if w not in written]
        new = {
            AnchorType.USER_INTENT: "\n".join(
                self._intent_lines(request, msgs, prev_anchors, scale)
            ),
            AnchorType.EXECUTION_PROGRESS: self._progress(steps, k(self.max_progress)),
            AnchorType.KEY_DECISION: self._decisions(msgs, self.max_decisions),
            AnchorType.TRIED_SOLUTION: self._tried(steps),
            AnchorType.NEXT_STEP: self._next(msgs, steps),
        }
        new_anchors = [
            Anchor(
                type=t,
                content=v
                if isinstance(v, str) and v
                else _bullets(v)
                if isinstance(v, list)
                else NA,
            )
            for t, v in new.items()
        ]
        final = self._capped(merge_anchors(prev_anchors, new_anchors), k, item_chars)
        prev_files, earlier = _previous_summary(prev_summary)
        files = union_items(prev_files, written)
        lines, offl = self._summary_lines(request, msgs, steps, files, earlier, scale)
        summary = "\n".join(_defuse(ln) for ln in lines)
        if request.style == "sections":
            return _render_sections(final, summary, files, offl)
        return render_anchors(final, summary)

    def _intent_lines(
        self,
        request: SummaryRequest,
        msgs: Sequence[Message],
        prev_anchors: Sequence[Anchor],
        scale: float,
    ) -> list[str]:
        """The user's intent: the earlier summary's (or the first request), and the newest
        later requests."""
        prev_intent = next(
            (a for a in prev_anchors if a.type == AnchorType.USER_INTENT and not a.is_empty), None
        )
        agent = detect_agent(m.text for m in request.messages[:3] if m.role == "system")
        requests = user_requests(msgs, agent)
        intent_lines: list[str] = []
        if prev_intent is not None:
            intent_lines = [ln for ln in prev_intent.content.splitlines() if ln.strip()]
            later = requests
        else:
            if requests:
                intent_lines = [intent(requests[0], max(80, int(self.intent_chars * scale)))]
            later = requests[1:]
        intent_lines += [
            f"Later request: {intent(r, max(60, int(150 * scale)))}" for r in later[-3:]
        ]
        return [_defuse(ln) for ln in intent_lines]

    def _capped(
        self, merged: Sequence[Anchor], k: Callable[[int], int], item_chars: int
    ) -> list[Anchor]:
        """The list anchors within their item caps (the rest counted), items clipped."""
        caps = {
            AnchorType.EXECUTION_PROGRESS: k(self.max_progress),
            AnchorType.KEY_DECISION: k(self.max_decisions),
            AnchorType.TRIED_SOLUTION: k(self.max_tried),
            AnchorType.NEXT_STEP: k(self.max_next),
        }
        final: list[Anchor] = []
        for a in merged:
            if a.type in caps:
                noun = "actions" if a.type == AnchorType.EXECUTION_PROGRESS else "items"
                items = [clip(i, item_chars) for i in _cap(a.items(), caps[a.type], noun)]
                final.append(Anchor(type=a.type, content=_bullets(items)))
            else:
                final.append(a)
        return final

    def _summary_lines(
        self,
        request: SummaryRequest,
        msgs: Sequence[Message],
        steps: Sequence[Step],
        files: list[str],
        earlier: list[str],
        scale: float,
    ) -> tuple[list[str], list[str]]:
        """The summary text's lines, and the offload placeholders the range held."""

        def k(n: int) -> int:
            return max(1, int(n * scale))

        item_chars = max(60, int(220 * scale))
        n_user = sum(m.role == "user" for m in msgs)
        n_asst = sum(m.role == "assistant" for m in msgs)
        n_tool = sum(m.role == "tool" for m in msgs)
        fails = sum(s.failed for s in steps)
        lines = []
        if earlier:
            lines.append("Earlier: " + clip(" ".join(earlier), max(100, int(600 * scale))))
        lines.append(
            f"Compacted {len(msgs) + request.omitted} messages ({n_user} user, {n_asst} assistant, "
            f"{n_tool} tool results{_read_of(request.omitted)}); "
            f"{len(steps)} tool calls, {fails} failed."
        )
        source = [f for f in files if not _is_scratch(f)]
        scratch = [f for f in files if _is_scratch(f)]
        for label, group, n in (
            ("Files modified", source, k(20)),
            ("Scratch files written", scratch, k(12)),
        ):
            if group:
                more = f", (+{len(group) - n} more)" if len(group) > n else ""
                lines.append(f"{label}: " + ", ".join(group[:n]) + more)
        ran = [s for s in steps if s.answered and s.kind in ("test", "run")]
        if ran:
            lines.append(f"Last run: `{ran[-1].label}` -> {ran[-1].outcome or 'ok'}")
        offl = re.findall(
            r"\[offloaded[^\]\n]{0,200}\]",
            "\n".join(render_content(m.content) for m in msgs if m.role == "tool"),
        )
        if offl:
            lines.append("Offloaded outputs: " + "; ".join(dict.fromkeys(offl[-k(5) :])))
        lines += [f"Note: {clip(n, item_chars)}" for n in request.notes[: k(3)]]
        return lines, offl


def _previous_summary(prev_summary: str) -> tuple[list[str], list[str]]:
    """The files an earlier summary listed, and its other lines (what happened earlier)."""
    prev_files: list[str] = []
    earlier: list[str] = []
    for ln in prev_summary.splitlines():
        if ln.startswith(("Files modified:", "Scratch files written:")):
            prev_files += [
                f.strip()
                for f in ln.split(":", 1)[1].split(",")
                if f.strip() and not f.strip().startswith("(+")
            ]
        elif ln.strip() and not ln.startswith("Earlier:"):
            earlier.append(ln.strip())
        elif ln.startswith("Earlier:"):
            earlier.insert(0, ln[len("Earlier:") :].strip())
    return prev_files, earlier


_SCRATCH = re.compile(
    r"^(?:/tmp/|tmp/)|^[^/]*(?:\.txt|\.log|\.diff|\.patch|\.out)$|^(?:reproduc|repro|debug|scratch|temp|tmp"
    r"|check|trace|verify|test_|analy[sz]e|implement|apply|final|run_|simple|explore|update|modify"
    r"|inspect|edit_|setup_repro|better|actual|patch|fix|demo|try|quick|minimal)[^/]*\.(?:py|sh|sql)$"
    r"|^[^/]*_fix\w*\.py$",
    re.I,
)


def _is_scratch(path: str) -> bool:
    """A throwaway file at the top level (reproduce_issue.py, debug.py, patch.txt ...)."""
    return bool(_SCRATCH.search(path))


def _bullets(items: Sequence[str]) -> str:
    return "\n".join(f"- {i}" for i in items) if items else NA


def _defuse(line: str) -> str:
    """Keep a free-text line from being read back as a section header."""
    return f"> {line}" if is_section_header(line) else line


def _render_sections(
    anchors: Sequence[Anchor], summary: str, files: list[str], offloaded: list[str]
) -> str:
    by = {a.type: a for a in anchors}
    body = [summary]
    for atype, label in (
        (AnchorType.EXECUTION_PROGRESS, "Execution Progress:"),
        (AnchorType.KEY_DECISION, "Key Decisions:"),
        (AnchorType.TRIED_SOLUTION, "Tried Solutions:"),
    ):
        if not by[atype].is_empty:
            body += ["", label, by[atype].content]
    artifacts = [f"- {f} (modified)" for f in files] + [f"- {o}" for o in dict.fromkeys(offloaded)]
    parts = [
        "## SESSION INTENT",
        by[AnchorType.USER_INTENT].content,
        "",
        "## SUMMARY",
        "\n".join(body),
        "",
        "## ARTIFACTS",
        "\n".join(artifacts) or NA,
        "",
        "## NEXT STEPS",
        by[AnchorType.NEXT_STEP].content,
    ]
    return "\n".join(parts)


def _hard_bound(text: str, limit: int, style: str) -> str:
    """Last resort for tiny budgets: keep every header, cut each section body."""
    parts = re.split(r"(?m)^(#{2,3} .*)$", text)
    headers = [p for p in parts if p.startswith("##")]
    budget = max((limit - sum(len(h) + 2 for h in headers)) // max(len(headers), 1), 8)
    out = [parts[0][:budget]] if parts[0].strip() else []
    for p in parts[1:]:
        out.append(p if p.startswith("##") else "\n" + clip(p.strip(), budget) + "\n")
    result = "".join(out).strip()
    return result[:limit] if len(result) > limit else result


def _read_of(omitted: int) -> str:
    """How the count line says that the middle of a long range was not read."""
    return f" of those read; {omitted} in between are in the log" if omitted else ""


__all__ = ["ExtractiveSummarizer"]
