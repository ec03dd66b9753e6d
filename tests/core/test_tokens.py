"""Token counting: exact counters, the heuristic's accuracy, message/tool counting, cache,
calibration and counter resolution.

The acceptance test of the heuristic: over every one of the 45 real trajectories, the total of
``count_message`` stays within 10% of the same total computed with o200k_base.
"""

from __future__ import annotations

import json
import re
import sys
import types
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from contextfold.core.messages import Message, ToolCall, assistant, system, tool, user
from contextfold.core.tokens import (
    IMAGE_TOKENS,
    IMAGE_TOKENS_LOW,
    MESSAGE_OVERHEAD,
    TOOL_CALL_OVERHEAD,
    BpeCounter,
    Calibration,
    HeuristicCounter,
    MessageTokenCache,
    TiktokenCounter,
    TokenCounter,
    count_message,
    count_messages,
    count_tools,
    get_counter,
)
from contextfold.core.wire import messages_from_openai
from contextfold.errors import ConfigError, ContextFoldError
from tests.conftest import SEEDS_DIR, load_trace, require_module, trace_files

require_module("bpe_openai")

SRC_DIR = Path(__file__).resolve().parents[2] / "src" / "contextfold"

# Handwritten samples (also used by benchmarks/tokens_accuracy.py). Chinese prose comes from
# these and from the design notes in docs/design-notes.

ENGLISH = (
    "Long-running agents accumulate tool results and conversation history until, sooner or "
    "later, the model's context window runs out. When that happens the provider rejects the "
    "request outright, so something has to give before the limit is reached: old messages can"
    " be summarized, large tool outputs can be moved to files, and arguments that were only "
    "needed once can be shortened. The difficulty is doing this without losing what the agent"
    " has learned along the way. A naive policy that drops the oldest messages first will "
    "happily throw away the user's original request, the decisions that were made halfway "
    "through, and the list of approaches that were already tried and failed.\n\n"
    "This library takes a graduated approach. When usage crosses sixty percent of the window "
    "it records a warning; at seventy percent it begins offloading the largest tool results "
    "to disk, leaving a short preview and a pointer in the conversation; at eighty percent it"
    " summarizes everything except the most recent exchanges with a language model; and at "
    "ninety-five percent, in an emergency, it falls back to mechanical truncation so that a "
    "failing summarizer can never stop the run. Every step is recorded, so you can always "
    "find out afterwards what was removed, when, and why.\n\n"
    "Token counting is the foundation of all of this. If the estimate is too low, the agent "
    "sails past a threshold without noticing and the next request fails. If it is too high, "
    "the manager compacts far too early and keeps discarding context that still fit "
    "comfortably. For English prose the old rule of thumb, four characters per token, is not "
    "bad. For source code it is noticeably optimistic, because indentation, brackets and "
    "operators each tend to cost a token of their own. For Chinese, Japanese and Korean it is"
    " wrong by a factor of three or more: a single ideograph or syllable is often a whole "
    "token by itself.\n\n"
    "The heuristic counter therefore looks at the text one run of characters at a time. Words"
    " cost about one token each, with a surcharge for unusually long identifiers; numbers "
    "cost one token per three digits; punctuation costs roughly one token per mark, although "
    "common pairs such as a closing parenthesis followed by a colon are merged; runs of "
    "spaces and newlines are counted separately; and characters from other scripts are "
    "charged at rates measured on real text. None of this requires a tokenizer download, and "
    "the whole computation runs in a few milliseconds even on a megabyte of input.\n\n"
    "When the provider reports how many tokens a request actually used, the manager feeds "
    "that number back into a calibration factor. The factor moves slowly, ignores readings "
    "that are obviously wrong, and never strays outside a factor of two in either direction, "
    "so a single odd response cannot derail the estimate. The factor is saved with the "
    "session and restored when the session is resumed.\n\n"
    "On a quiet morning in late October, the harbour was almost empty. A few fishing boats "
    "had gone out before dawn, and the ones that remained knocked gently against the pier as "
    "the tide came in. An old man was mending a net on the steps of the customs house, "
    "working slowly and without looking up, as if he had done it so many times that his hands"
    " no longer needed him. Gulls circled overhead, complaining about nothing in particular. "
    "Further along the quay, the bakery had opened its shutters, and the smell of fresh bread"
    " drifted out over the water. It was the kind of day that makes you forget, for an hour "
    "or two, whatever it was you were worried about the night before.\n\n"
    "She had come back to the town after almost twenty years away. The streets were narrower "
    "than she remembered, and the shops had changed hands, but the church clock still ran "
    "four minutes fast and the café on the corner still served its coffee in chipped blue "
    "cups. She sat by the window, opened her notebook, and began, for the first time in "
    "months, to write something that was not a report.\n"
)

CHINESE = """\
清晨六点，城市还没有完全醒来。街角的早餐店已经升起了热气，老板娘一边擀着面皮，一边招呼着第一批赶早班的客人。豆浆、油条、煎饼果子，这些再普通不过的食物，却是许多人一天中最踏实的开始。我常常在这里坐上十分钟，看着窗外的行人匆匆走过，心里盘算着当天要完成的工作。

在软件工程里，最难的往往不是写出能运行的代码，而是让代码在半年之后仍然能被别人读懂。一个好的函数名胜过十行注释，一个清晰的模块边界胜过一份冗长的设计文档。我们在评审代码时，除了检查逻辑是否正确，还会关注错误信息是否说清楚了出错的位置和原因，测试是否覆盖了真正重要的行为，以及新的依赖是否真的有必要引入。

长时间运行的智能体会不断积累工具调用的结果和对话历史，迟早会逼近模型上下文窗口的上限。一旦超过上限，请求就会被直接拒绝，所以必须提前采取措施：把早期的消息压缩成摘要，把体积庞大的工具输出转存到文件里，把只用过一次的参数截短。真正的难点在于，做这些事情的同时不能丢掉智能体已经学到的东西，比如用户最初的意图、中途做出的关键决定，以及已经尝试过但失败的方案。

秋天的傍晚来得很快。下班的时候，天边只剩下一抹淡淡的橙红色，路灯一盏接一盏地亮起来。骑车经过河边，能闻到桂花的香气，混着一点潮湿的泥土味。小时候总觉得一年很长，如今却发现日子像翻书一样，一页接着一页，还没来得及细看就已经翻过去了。
"""

JAPANESE = """\
長時間動作するエージェントは、ツールの呼び出し結果や会話の履歴が積み重なるにつれて、やがてモデルのコンテキストウィンドウの上限に近づいていきます。上限を超えるとリクエストそのものが拒否されるため、その前に古いメッセージを要約したり、大きなツール出力をファイルに退避したりする必要があります。しかし、単純に古いものから削除していくと、ユーザーが最初に伝えた意図や、途中で下した重要な判断、すでに試して失敗した方法などの情報が失われてしまいます。

そこで本ライブラリでは、トークンの使用率に応じて四段階の閾値を設けています。使用率が六割を超えると警告を記録し、七割を超えると大きなツール結果から順にファイルへ書き出して、会話の中には短いプレビューと参照先だけを残します。八割を超えた場合は、直近のやり取りを残したうえで、それより前の部分を言語モデルで要約します。九割五分を超えた緊急時には、要約に失敗しても処理を止めないように、機械的な切り詰めに切り替えます。

トークン数の見積もりは、この仕組み全体の土台です。見積もりが実際より小さすぎると、閾値に達したことに気づかないまま上限を超えてしまいます。逆に大きすぎると、まだ十分に余裕があるのに不要な圧縮が繰り返され、せっかくの文脈が失われます。英語の文章であれば「四文字でおよそ一トークン」という経験則がそれなりに当てはまりますが、日本語や中国語ではまったく当てはまりません。漢字やひらがなは一文字あたり一トークン前後になることが多く、文字数を四で割るだけでは実際の三分の一以下に見積もってしまいます。

そのため、テキストを文字の種類ごとの連続部分に分け、それぞれに異なる係数を掛けて合計する方法を採用しました。英単語は一語でおよそ一トークン、長い識別子はその長さに応じて加算し、数字は三桁ごとに一トークン、記号は原則として一つずつ数えます。空白や改行、インデントもそれぞれ独立したトークンになることが多いので、別に扱います。係数は実際のエージェントの実行記録と、英語、コード、JSON、日本語、中国語、韓国語の文章を使って調整しました。

また、プロバイダーが応答と一緒に返す実際の使用量を観測して、見積もりとの比率を少しずつ補正する仕組みも用意しています。比率が極端な値になった場合は、計測の誤りとみなして無視します。補正係数はセッションごとに保存されるため、再開したときにも引き継がれます。

東京の朝は早い。始発の電車が動き出す頃には、駅前の喫茶店にもう明かりがついていて、新聞を広げた年配の客がコーヒーを飲んでいる。私は毎朝同じ席に座り、窓の外を行き交う人々を眺めながら、その日の仕事の段取りを考えることにしている。昨日は雨だったが、今日は空がよく晴れていて、遠くの山までくっきりと見えた。季節の変わり目には体調を崩しやすいので、無理をせず、できることから一つずつ片付けていこうと思う。

先週、古い友人から久しぶりに手紙が届いた。大学を卒業してから十年以上が経ち、お互いに仕事や家庭のことで忙しく、連絡を取る機会もすっかり減っていた。手紙には、地方の小さな町で図書館の司書として働いていること、子どもが小学校に入学したこと、そして近いうちに東京へ出張する予定があることが、丁寧な字で書かれていた。返事を書こうと便箋を取り出したものの、何から書けばよいのか迷ってしまい、結局その夜は書き出しの一行だけで筆が止まってしまった。
"""

JAPANESE_2 = """\
このモジュールは、メッセージごとのトークン数をキャッシュします。同じメッセージを何度数えても結果は変わらず、内容が差し替えられた場合だけ数え直します。設定ファイルで推定方法を切り替えることもできますが、既定の方法は外部のライブラリを必要とせず、どの環境でも同じ結果を返します。秋の京都は観光客でにぎわいますが、早朝の寺院は驚くほど静かで、落ち葉を掃く音だけが境内に響いていました。
"""

KOREAN = """\
오랫동안 실행되는 에이전트는 도구 호출 결과와 대화 기록이 쌓이면서 결국 모델의 컨텍스트 창 한도에 가까워집니다. 한도를 넘으면 요청 자체가 거부되기 때문에, 그 전에 오래된 메시지를 요약하거나 큰 도구 출력을 파일로 옮겨 두어야 합니다. 하지만 단순히 오래된 것부터 지워 나가면 사용자가 처음에 전달한 의도, 중간에 내린 중요한 결정, 이미 시도했다가 실패한 방법 같은 정보가 사라지게 됩니다.

그래서 이 라이브러리는 토큰 사용률에 따라 네 단계의 임계값을 둡니다. 사용률이 육십 퍼센트를 넘으면 경고를 기록하고, 칠십 퍼센트를 넘으면 큰 도구 결과부터 차례로 파일에 기록한 뒤 대화 안에는 짧은 미리보기와 참조 경로만 남깁니다. 팔십 퍼센트를 넘으면 최근의 대화는 그대로 두고 그보다 앞부분을 언어 모델로 요약합니다. 구십오 퍼센트를 넘는 긴급 상황에서는 요약이 실패하더라도 작업이 멈추지 않도록 기계적인 잘라내기로 전환합니다.

토큰 수를 추정하는 일은 이 구조 전체의 기반입니다. 추정치가 실제보다 너무 작으면 임계값에 도달한 것을 알아차리지 못한 채 한도를 넘어 버립니다. 반대로 너무 크면 아직 여유가 충분한데도 불필요한 압축이 반복되어 소중한 맥락을 잃게 됩니다. 영어 문장이라면 네 글자에 대략 한 토큰이라는 경험칙이 어느 정도 맞지만, 한국어나 중국어, 일본어에서는 전혀 맞지 않습니다. 한글 음절은 한 글자가 한 토큰에 가까운 경우가 많아서, 글자 수를 넷으로 나누기만 하면 실제보다 훨씬 적게 추정하게 됩니다.

따라서 텍스트를 문자 종류별로 연속된 구간으로 나누고, 각 구간에 서로 다른 계수를 곱해 합산하는 방법을 택했습니다. 영어 단어는 한 단어에 약 한 토큰, 긴 식별자는 길이에 따라 더하고, 숫자는 세 자리마다 한 토큰, 기호는 원칙적으로 하나씩 셉니다. 공백과 줄바꿈, 들여쓰기도 각각 독립된 토큰이 되는 경우가 많으므로 따로 다룹니다. 계수는 실제 에이전트 실행 기록과 영어, 코드, JSON, 일본어, 중국어, 한국어 문장을 사용해 조정했습니다.

서울의 가을은 짧지만 아름답다. 아침저녁으로 선선한 바람이 불기 시작하면 공원의 은행나무가 하루가 다르게 노랗게 물들고, 주말마다 산책하는 사람들로 길이 붐빈다. 나는 퇴근길에 일부러 한 정거장 먼저 버스에서 내려 강변을 따라 걷곤 한다. 해가 지는 시간이 점점 빨라져서 집에 도착할 무렵이면 하늘이 이미 어둑어둑하다. 그래도 걷는 동안에는 하루 동안 머릿속을 채웠던 복잡한 생각들이 조금씩 정리되는 느낌이 들어서 좋다.

지난달에는 오랜만에 고향에 내려가 부모님을 뵈었다. 어머니는 여전히 새벽같이 일어나 텃밭을 돌보셨고, 아버지는 마당에 앉아 라디오를 들으며 농사 이야기를 하셨다. 어릴 때 뛰어놀던 골목은 많이 변해서 낯설었지만, 동네 어귀의 오래된 느티나무만은 예전 모습 그대로였다. 서울로 돌아오는 기차 안에서 창밖을 바라보며, 앞으로는 좀 더 자주 찾아뵈어야겠다고 다짐했다.
"""

KOREAN_2 = """\
이 모듈은 메시지마다 토큰 수를 캐시합니다. 같은 메시지를 여러 번 세어도 결과는 달라지지 않으며, 내용이 바뀐 경우에만 다시 셉니다. 설정 파일에서 추정 방법을 바꿀 수도 있지만, 기본 방법은 외부 라이브러리가 필요 없고 어떤 환경에서도 같은 결과를 돌려줍니다. 제주도의 겨울 바다는 생각보다 따뜻한 빛을 띠고 있었고, 해안 도로를 따라 늘어선 귤밭에는 아직 수확하지 않은 열매가 주렁주렁 달려 있었다.
"""


HEURISTIC = HeuristicCounter()


@pytest.fixture(scope="module")
def o200k() -> BpeCounter:
    return BpeCounter("o200k_base")


def rel_error(estimate: int, exact: int) -> float:
    return estimate / exact - 1.0


def seed_chinese_prose() -> str:
    """Lines of the Chinese design notes that are prose (no diagrams, mostly ideographs)."""
    lines: list[str] = []
    for path in sorted(SEEDS_DIR.glob("0*.txt")):
        for line in path.read_text(encoding="utf-8").splitlines():
            han = len(re.findall(r"[\u4e00-\u9fff]", line))
            if han >= 10 and han >= 0.5 * len(line.strip()):
                lines.append(line)
    return "\n".join(lines)


def code_sample() -> str:
    return "\n\n".join(p.read_text(encoding="utf-8") for p in sorted(SRC_DIR.glob("*.py")))


def json_sample() -> str:
    data = load_trace(trace_files()[0])[:20]
    return json.dumps(data, indent=2)


# ---------------------------------------------------------------------------- protocol


def test_counters_conform_to_protocol(o200k: BpeCounter) -> None:
    for counter in (HEURISTIC, o200k, BpeCounter("cl100k_base"), get_counter()):
        assert isinstance(counter, TokenCounter)
        assert isinstance(counter.name, str) and counter.name
        assert counter.count_text("") == 0
        assert isinstance(counter.count_text("hello"), int)
    assert HEURISTIC.name == "heuristic"
    assert o200k.name == "bpe:o200k_base"


# ---------------------------------------------------------------------------- exact counters


@pytest.mark.parametrize(
    ("encoding", "text", "expected"),
    [
        ("o200k_base", "hello world", 2),
        ("cl100k_base", "hello world", 2),
        ("o200k_base", "tiktoken is great!", 6),
        ("o200k_base", "Hello, 世界! 123456789", 8),
        ("cl100k_base", "Hello, 世界! 123456789", 11),
    ],
)
def test_bpe_counter_known_strings(encoding: str, text: str, expected: int) -> None:
    assert BpeCounter(encoding).count_text(text) == expected


def test_bpe_counter_counts_special_token_text_as_ordinary(o200k: BpeCounter) -> None:
    # Tool output may contain "<|endoftext|>": it must be counted, not rejected.
    assert o200k.count_text("<|endoftext|>") == 7


def test_bpe_counter_chunks_long_text_exactly(o200k: BpeCounter) -> None:
    import bpe_openai

    lines = [f"    value_{i} = compute({i}, 'x' * {i % 7})  # step {i}" for i in range(4000)]
    text = "\n".join(lines)
    assert len(text) > 100_000
    direct = len(bpe_openai.get_encoding("o200k_base").encode_ordinary(text))
    assert o200k.count_text(text) == direct


def test_bpe_counter_handles_inputs_beyond_bpe_openai_limits(o200k: BpeCounter) -> None:
    # 1.2M characters and ~600K tokens: over both of bpe-openai's single-call limits.
    text = "1 2 3 4 5 6 7 8 9\n" * 70_000
    assert o200k.count_text(text) == 70_000 * o200k.count_text("1 2 3 4 5 6 7 8 9\n")


# ---------------------------------------------------------------------------- heuristic


def test_heuristic_basic_properties() -> None:
    assert HEURISTIC.count_text("") == 0
    assert HEURISTIC.count_text("a") == 1
    assert HEURISTIC.count_text(".") == 1
    text = code_sample()
    assert HEURISTIC.count_text(text) == HEURISTIC.count_text(text)
    half = len(text) // 2
    whole = HEURISTIC.count_text(text)
    parts = HEURISTIC.count_text(text[:half]) + HEURISTIC.count_text(text[half:])
    assert abs(whole - parts) <= 3
    assert HEURISTIC.count_text(text + text) >= 2 * whole - 2


def test_heuristic_survives_odd_text() -> None:
    for text in ["\ud800 lone surrogate", "\x00\x01\x02", "🎉" * 50, " " * 1000, "\n" * 500]:
        assert HEURISTIC.count_text(text) >= 1


@pytest.mark.slow
@pytest.mark.parametrize("path", trace_files(), ids=lambda p: p.name[:60])
def test_heuristic_within_10_percent_on_every_trajectory(path: Path, o200k: BpeCounter) -> None:
    msgs = messages_from_openai(load_trace(path))
    exact = count_messages(o200k, msgs)
    estimate = count_messages(HEURISTIC, msgs)
    assert abs(rel_error(estimate, exact)) <= 0.10, (path.name, estimate, exact)


def test_all_45_trajectories_are_present() -> None:
    assert len(trace_files()) == 45


@pytest.mark.parametrize(
    "name", ["seed_chinese", "CHINESE", "JAPANESE", "JAPANESE_2", "KOREAN", "KOREAN_2"]
)
def test_heuristic_within_10_percent_on_cjk(name: str, o200k: BpeCounter) -> None:
    text = seed_chinese_prose() if name == "seed_chinese" else globals()[name]
    assert len(text.encode("utf-8")) > 500
    exact = o200k.count_text(text)
    assert abs(rel_error(HEURISTIC.count_text(text), exact)) <= 0.10, name
    # the naive rule is far off here: that is what the script-aware heuristic is for
    assert len(text) / 4 < 0.6 * exact


def test_cjk_samples_are_several_kilobytes() -> None:
    assert len(seed_chinese_prose().encode("utf-8")) > 5000
    for text in (CHINESE, JAPANESE, KOREAN):
        assert len(text.encode("utf-8")) > 1500


@pytest.mark.parametrize("name", ["english", "code", "json"])
def test_heuristic_within_15_percent_on_english_code_json(name: str, o200k: BpeCounter) -> None:
    text = {"english": ENGLISH, "code": code_sample(), "json": json_sample()}[name]
    exact = o200k.count_text(text)
    assert abs(rel_error(HEURISTIC.count_text(text), exact)) <= 0.15, name


# ---------------------------------------------------------------------------- messages


class CharCounter:
    """One token per character: makes the structure of message counting visible."""

    name = "chars"

    def count_text(self, text: str) -> int:
        return len(text)


def test_count_message_parts() -> None:
    c = CharCounter()
    assert count_message(c, user("hello")) == MESSAGE_OVERHEAD + 5
    assert count_message(c, Message(role="assistant")) == MESSAGE_OVERHEAD
    named = Message(role="user", content="hi", name="bob")
    assert count_message(c, named) == MESSAGE_OVERHEAD + 2 + 1 + 3
    assert count_message(c, tool("call_1", "ok")) == MESSAGE_OVERHEAD + 2 + len("call_1")
    call = ToolCall(id="c1", name="bash", arguments='{"cmd":"ls"}')
    msg = assistant("run", [call, replace(call, id="c2")])
    per_call = TOOL_CALL_OVERHEAD + 2 + 4 + len('{"cmd":"ls"}')
    assert count_message(c, msg) == MESSAGE_OVERHEAD + 3 + 2 * per_call


def test_count_message_content_blocks() -> None:
    c = CharCounter()
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 50_000}}
    low = {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low"}}
    anthropic_image = {"type": "image", "source": {"type": "base64", "data": "B" * 9999}}
    audio = {"type": "input_audio", "input_audio": {"data": "abc", "format": "wav"}}
    blocks = ({"type": "text", "text": "look"}, image, low, anthropic_image, audio)
    msg = Message(role="user", content=blocks)
    audio_json = len(json.dumps(audio, separators=(",", ":")))
    expected = MESSAGE_OVERHEAD + 4 + IMAGE_TOKENS + IMAGE_TOKENS_LOW + IMAGE_TOKENS + audio_json
    assert count_message(c, msg) == expected
    assert 85 <= IMAGE_TOKENS_LOW <= IMAGE_TOKENS <= 1000


def test_count_message_anthropic_tool_blocks() -> None:
    c = CharCounter()
    result = {
        "type": "tool_result",
        "tool_use_id": "tu_1",
        "content": [{"type": "text", "text": "12345"}],
    }
    use = {"type": "tool_use", "id": "tu_1", "name": "bash", "input": {"cmd": "ls"}}
    thinking = {"type": "thinking", "thinking": "hmm", "signature": "S" * 500}
    assert count_message(c, Message(role="user", content=(result,))) == (
        MESSAGE_OVERHEAD + TOOL_CALL_OVERHEAD + 4 + 5
    )
    assert count_message(c, Message(role="assistant", content=(use, thinking))) == (
        MESSAGE_OVERHEAD + TOOL_CALL_OVERHEAD + 4 + 4 + len('{"cmd":"ls"}') + 3
    )


def test_count_messages_sums() -> None:
    msgs = [system("be brief"), user("hi"), assistant("hello")]
    assert count_messages(HEURISTIC, msgs) == sum(count_message(HEURISTIC, m) for m in msgs)
    assert count_messages(HEURISTIC, []) == 0


# ---------------------------------------------------------------------------- tools

PARAMS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "command": {"type": "string", "description": "The shell command to run."},
        "timeout": {"type": "integer", "description": "Seconds before the command is killed."},
    },
    "required": ["command"],
}
DESCRIPTION = "Run a shell command in the repository and return its output."


def test_count_tools_openai_and_anthropic_formats_agree(o200k: BpeCounter) -> None:
    openai_tool = {
        "type": "function",
        "function": {"name": "bash", "description": DESCRIPTION, "parameters": PARAMS},
    }
    anthropic_tool = {"name": "bash", "description": DESCRIPTION, "input_schema": PARAMS}
    for counter in (HEURISTIC, o200k):
        a = count_tools(counter, [openai_tool])
        b = count_tools(counter, [anthropic_tool])
        assert a == b
        body = counter.count_text(DESCRIPTION) + counter.count_text(json.dumps(PARAMS))
        assert body * 0.8 <= a <= body + 40
        two = count_tools(counter, [openai_tool, anthropic_tool])
        assert a < two < 2 * a
    assert count_tools(HEURISTIC, []) == 0


def test_count_tools_grows_with_schema() -> None:
    small = {"name": "f", "description": "d", "input_schema": {"type": "object"}}
    big = {"name": "f", "description": "d", "input_schema": PARAMS}
    assert count_tools(HEURISTIC, [big]) > count_tools(HEURISTIC, [small])
    odd = {"type": "web_search_20250305", "name": "web_search", "max_uses": 5}
    assert count_tools(CharCounter(), [odd]) > len("web_search_20250305")


# ---------------------------------------------------------------------------- cache


class CountingCounter:
    name = "counting"

    def __init__(self) -> None:
        self.calls = 0

    def count_text(self, text: str) -> int:
        self.calls += 1
        return HEURISTIC.count_text(text)


def test_cache_returns_same_numbers_and_counts_once() -> None:
    msgs = messages_from_openai(load_trace(trace_files()[0]))
    counter = CountingCounter()
    cache = MessageTokenCache(counter)
    first = [cache.count(m) for m in msgs]
    assert first == [count_message(HEURISTIC, m) for m in msgs]
    calls = counter.calls
    assert [cache.get(m) for m in msgs] == first
    assert counter.calls == calls
    assert len(cache) == len({m.uuid for m in msgs})
    # an equal copy (same uuid, same content) is a hit too
    copy = replace(msgs[1], metadata={"seen": True})
    assert cache.count(copy) == first[1]
    assert counter.calls == calls
    assert cache.count_many(msgs) == sum(first)


def test_cache_recounts_replaced_content() -> None:
    cache = MessageTokenCache(HEURISTIC)
    big = tool("call_1", "line of output\n" * 2000)
    before = cache.count(big)
    placeholder = big.with_content("[offloaded to tool-results/call_1.txt: 2000 lines]")
    assert placeholder.uuid == big.uuid
    after = cache.count(placeholder)
    assert after == count_message(HEURISTIC, placeholder)
    assert after < before / 10
    assert cache.count(big) == before
    cache.clear()
    assert len(cache) == 0


# ---------------------------------------------------------------------------- calibration


def test_calibration_smooths_and_applies() -> None:
    cal = Calibration()
    assert cal.scale == 1.0
    assert cal.apply(1000) == 1000
    assert cal.observe(1000, 1200) == pytest.approx(1.06)
    assert cal.observe(1000, 1200) == pytest.approx(1.06 * 0.7 + 1.2 * 0.3)
    for _ in range(50):
        cal.observe(1000, 1200)
    assert cal.scale == pytest.approx(1.2, abs=1e-6)
    assert cal.apply(1000) == 1200


def test_calibration_ignores_nonsense_and_clamps() -> None:
    cal = Calibration()
    for estimated, actual in [(0, 100), (100, 0), (-5, 10), (100, 26_000), (100, 20), (10, 5)]:
        before = cal.scale
        cal.observe(estimated, actual)
        if (estimated, actual) == (10, 5):
            assert cal.scale < before  # a ratio of 0.5 is plausible and taken
        else:
            assert cal.scale == before
    for _ in range(100):
        cal.observe(100, 390)  # ratio 3.9: plausible, but the scale stops at 2.0
    assert cal.scale == 2.0
    for _ in range(100):
        cal.observe(100, 26)
    assert cal.scale == 0.5


def test_calibration_round_trip() -> None:
    cal = Calibration()
    cal.observe(1000, 1300)
    cal.observe(1000, 1100)
    data = json.loads(json.dumps(cal.to_dict()))
    back = Calibration.from_dict(data)
    assert back.scale == cal.scale
    assert back.to_dict() == cal.to_dict()
    assert Calibration.from_dict({}).scale == 1.0
    for bad in [{"scale": "big"}, {"scale": True}, {"observations": -1}, []]:
        with pytest.raises(ConfigError):
            Calibration.from_dict(bad)  # type: ignore[arg-type]


def test_calibration_learns_the_fixed_prefix_apart_from_the_messages() -> None:
    """The provider counts the fixed prefix (system prompt, tool schemas) at 1.15 times the
    estimate and the messages at 0.8 times: calls with the same prefix and growing messages
    teach both scales, where one scale for the whole request would settle in between."""
    cal = Calibration()
    fixed = 9_000
    for messages in range(2_000, 40_000, 1_500):
        cal.observe(messages, round(fixed * 1.15 + messages * 0.8), fixed=fixed)
    assert cal.scale == pytest.approx(0.8, abs=0.01)
    assert cal.fixed_scale == pytest.approx(1.15, abs=0.02)
    assert cal.apply(10_000) == pytest.approx(8_000, abs=100)
    assert cal.apply_fixed(fixed) == pytest.approx(10_350, abs=200)
    # a call whose prefix changed (other tools) is not paired: the messages' ratio is read
    # from the count less the prefix at its scale, and stays where it was
    before = cal.scale
    cal.observe(20_000, round(12_000 * 1.15 + 20_000 * 0.8), fixed=12_000)
    assert cal.scale == pytest.approx(before, abs=0.01)
    back = Calibration.from_dict(json.loads(json.dumps(cal.to_dict())))
    assert back.to_dict() == cal.to_dict()
    assert back.last == (12_000, 20_000, round(12_000 * 1.15 + 20_000 * 0.8))


def test_small_messages_after_a_large_prefix_do_not_take_its_error() -> None:
    """Claude Code's first calls: 2K tokens of messages after 8.5K of tool schemas that the
    provider counts at 1.3 times the estimate, the messages at 0.8 times, and the messages
    growing too little to pair two calls. What the count leaves after the prefix (at the scale
    the first call set) holds the prefix's error; weighed by the messages' share of the
    request, the messages' scale moves little instead of climbing towards 1.5."""
    cal = Calibration()
    fixed = 8_500
    for messages in (2_200, 2_270, 2_350, 2_490):
        cal.observe(messages, round(fixed * 1.3 + messages * 0.8), fixed=fixed)
    assert cal.scale < 1.2, cal.to_dict()  # (1.45 when the messages took it all)
    total = cal.apply(2_490) + cal.apply_fixed(fixed)
    assert total == pytest.approx(fixed * 1.3 + 2_490 * 0.8, rel=0.05)  # the whole count, nearly
    # and the paired calls that follow still teach both scales
    for messages in range(16_000, 60_000, 2_800):
        cal.observe(messages, round(fixed * 1.3 + messages * 0.8), fixed=fixed)
    assert cal.scale == pytest.approx(0.8, abs=0.02)
    assert cal.fixed_scale == pytest.approx(1.3, abs=0.05)


def test_calibration_of_an_earlier_release_reads_with_one_scale() -> None:
    back = Calibration.from_dict({"scale": 0.9, "observations": 4})
    assert back.fixed_scale == 0.9 and back.last is None
    for bad in [{"fixed_scale": "x"}, {"last": [1, 2]}, {"last": [1, -2, 3]}, {"last": "a"}]:
        with pytest.raises(ConfigError):
            Calibration.from_dict(bad)


# ---------------------------------------------------------------------------- get_counter


def test_get_counter_resolves_specs() -> None:
    assert get_counter() is get_counter(None)
    assert isinstance(get_counter(), HeuristicCounter)
    assert get_counter("heuristic").name == "heuristic"
    for spec, name in [
        ("o200k_base", "bpe:o200k_base"),
        ("cl100k_base", "bpe:cl100k_base"),
        ("bpe:o200k_base", "bpe:o200k_base"),
        (" BPE:cl100k_base ", "bpe:cl100k_base"),
    ]:
        counter = get_counter(spec)
        assert isinstance(counter, BpeCounter)
        assert counter.name == name
    mine = CharCounter()
    assert get_counter(mine) is mine


@pytest.mark.parametrize("spec", ["nonsense:o200k_base", "bpe:", "bpe:no_such_encoding", "p50k"])
def test_get_counter_rejects_unknown(spec: str) -> None:
    with pytest.raises(ContextFoldError) as info:
        get_counter(spec)
    assert isinstance(info.value, ConfigError)


def test_get_counter_rejects_non_counters() -> None:
    with pytest.raises(ConfigError):
        get_counter(42)  # type: ignore[arg-type]


def _clear_encoding_caches() -> None:
    from contextfold.core import tokens

    tokens._bpe_encoding.cache_clear()
    tokens._tiktoken_encoding.cache_clear()


def test_missing_bpe_openai_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    _clear_encoding_caches()
    monkeypatch.setitem(sys.modules, "bpe_openai", None)
    try:
        with pytest.raises(
            ConfigError, match=r"pip install '\.\[tokenizers\]' in the contextfold checkout"
        ):
            get_counter("o200k_base")
    finally:
        _clear_encoding_caches()


def test_tiktoken_failures_are_config_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    _clear_encoding_caches()
    try:
        monkeypatch.setitem(sys.modules, "tiktoken", None)
        with pytest.raises(
            ConfigError, match=r"pip install '\.\[tokenizers\]' in the contextfold checkout"
        ):
            get_counter("tiktoken:o200k_base")

        offline = types.ModuleType("tiktoken")

        def fail(name: str) -> Any:
            raise ConnectionError(f"cannot download {name}")

        offline.get_encoding = fail  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "tiktoken", offline)
        _clear_encoding_caches()
        with pytest.raises(ConfigError, match="cannot load encoding 'o200k_base'"):
            TiktokenCounter("o200k_base")
    finally:
        _clear_encoding_caches()


def test_tiktoken_counter_counts_with_a_loaded_encoding(monkeypatch: pytest.MonkeyPatch) -> None:
    import bpe_openai

    fake = types.ModuleType("tiktoken")
    fake.get_encoding = bpe_openai.get_encoding  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tiktoken", fake)
    _clear_encoding_caches()
    try:
        counter = get_counter("tiktoken:o200k_base")
        assert isinstance(counter, TiktokenCounter)
        assert counter.name == "tiktoken:o200k_base"
        assert counter.count_text("hello world") == 2
    finally:
        _clear_encoding_caches()
