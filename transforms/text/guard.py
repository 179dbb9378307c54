"""What a judge reads of crawled text, and the rows whose text addresses the judge.

Crawled text is data, never instructions. Two pure helpers every judge calls before it reads a row:

* `sanitize(text)`: NFKC (full-width and compatibility forms fold to their plain letters), invisible
  characters removed (zero-width spaces and joiners, soft hyphens, BOMs, bidi controls), line and
  paragraph separators made line breaks, and inside a word that mixes Latin with Cyrillic or Greek
  letters the look-alikes mapped to Latin ("іgnоrе" → "ignore"), so that hidden or disguised text is
  read as what it says.
* `injection_flags(text)`: why a row's text is not a question but talk to whoever reads it. Flags are
  structural (role markers such as `system:` or `[시스템]`, fence markers such as `</question>`, chat
  template tokens, code fences, fake section rules), about addressing (an instruction to ignore rules,
  a dictated answer or label, naming the classifier or the task), or about disguise (a base64 run that
  decodes to text, words mixing scripts, long repetitive padding). A flagged row is rejected by the
  judges (score 0): a physical question has no reason to carry any of them, and the cost is measured
  on the labelled seeds (docs/judges.md).

Neither knows a particular attack: the patterns describe kinds of text (roles, fences, dictated
answers), and `part_views` (transforms/text/views.py) covers the attacks that carry none of them.
"""

from __future__ import annotations

import base64
import binascii
import re
import unicodedata

_INVISIBLE = re.compile("[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064"
                        "\u2066-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0]")
# Cyrillic and Greek letters that look like Latin ones (Unicode confusables, the common subset).
_LOOKALIKE = str.maketrans({
    "а": "a", "в": "b", "е": "e", "к": "k", "м": "m", "н": "h", "о": "o", "р": "p", "с": "c", "т": "t",
    "у": "y", "х": "x", "і": "i", "ј": "j", "ѕ": "s", "ԁ": "d", "ԛ": "q", "ԝ": "w", "ɡ": "g", "ӏ": "l",
    "А": "A", "В": "B", "Е": "E", "К": "K", "М": "M", "Н": "H", "О": "O", "Р": "P", "С": "C", "Т": "T",
    "Х": "X", "І": "I", "Ј": "J", "Ѕ": "S", "α": "a", "ε": "e", "ι": "i", "κ": "k", "ν": "v", "ο": "o",
    "ρ": "p", "τ": "t", "υ": "u", "χ": "x", "Α": "A", "Β": "B", "Ε": "E", "Ζ": "Z", "Η": "H", "Ι": "I",
    "Κ": "K", "Μ": "M", "Ν": "N", "Ο": "O", "Ρ": "P", "Τ": "T", "Υ": "Y", "Χ": "X"})
_NOT_JAMO = re.compile(r"[^\u3131-\u318e]+")
_MIXED_WORD = re.compile(r"\w*(?:[A-Za-z][\u0370-\u03ff\u0400-\u04ff]|[\u0370-\u03ff\u0400-\u04ff][A-Za-z])\w*")


def sanitize(text: object) -> str:
    """The text a judge reads: NFKC, invisible characters removed, mixed-script look-alikes mapped."""
    # NFKC everywhere but on Hangul compatibility jamo (ㅋㅋ, ㅠㅠ): NFKC would turn them into conjoining
    # jamo, which reads as other text to the embedder
    out = _NOT_JAMO.sub(lambda m: unicodedata.normalize("NFKC", m.group(0)), str(text or ""))
    out = out.replace("\u2028", "\n").replace("\u2029", "\n")
    out = _INVISIBLE.sub("", out)
    return _MIXED_WORD.sub(lambda m: m.group(0).translate(_LOOKALIKE), out)


_ROLE = r"(?:system|sys|assistant|user|human|developer|admin|instruction|inst|시스템|관리자|어시스턴트|사용자|개발자|지시)"
_YES = r"(?:예|네|yes|y|true|1|물리(?:적)?|physical|positive)"
_PATTERNS: dict[str, re.Pattern[str]] = {
    # structure: roles, fences, chat templates
    "role_marker": re.compile(rf"(?im)(?:^|[\s.?!,;])\s*{_ROLE}\s*[:：>]\s|[\[【<(]\s*/?\s*{_ROLE}\s*[\]】>)]|<\|[^|>]{{1,30}}\|>|<<\s*/?sys\s*>>"
                              rf"|#{{2,}}\s*{_ROLE}|\b(?:system|assistant)\s+(?:prompt|message|note|override)\b"),
    "fence_marker": re.compile(r"(?i)</\s*[a-z_가-힣][\w-]{0,20}\s*>|<\s*(?:question|text|input|document|context|query|"
                               r"질문|문서|답변|answer|output)\s*>|```|\"\"\"|(?:^|\s)(?:={4,}|-{4,}|\*{4,}|#{4,})(?:\s|$)"),
    # addressing the reader: override the rules, dictate the verdict, name the judge or its task
    "addresses_judge": re.compile(
        r"(?i)\b(?:ignore|disregard|forget|override|bypass)\b.{0,40}\b(?:instruction|rule|prompt|guideline|above|"
        r"previous|prior|earlier|system)"
        rf"|\b(?:answer|respond|reply|say|output|return|label|classify|mark|rate)\b(?:\s+\w+){{0,3}}?\s+['\"“‘]?{_YES}\b"
        rf"|\b(?:the\s+)?(?:correct\s+)?(?:answer|label|verdict|classification)\s*(?:is|=|:)\s*['\"“‘]?{_YES}\b"
        r"|(?:이전|위|위의|앞|앞의|기존|모든|상기)\s*(?:의\s*)?(?:규칙|지시|지침|명령|설정|조건|기준|프롬프트|내용)\S{0,3}\s*(?:은|는|을|를)?\s*"
        r"(?:모두\s*|전부\s*|다\s*)?(?:무시|잊|취소|변경|바뀌)"
        rf"|['\"“‘]?{_YES}['\"”’]?\s*(?:이?라고|로|으로|만)\s*(?:만\s*)?(?:답|대답|응답|출력|표시|분류|판정|판단|표기)"
        rf"|(?:정답|답|판정|분류|라벨|레이블|결과|verdict)\s*(?:은|는|:|=|：|->|→)\s*['\"“‘]?{_YES}(?:\b|[^\w]|$)"
        r"|(?:분류기|판별기|판정기|채점기|classifier|language model|언어\s*모델)"
        r"|(?:물리적?\s*상식|physical\s+common\s*-?\s*sense|\bpiqa\b)"),
    # disguise: encoded instructions, padding
    "encoded_payload": re.compile(r"(?<![\w+/])[A-Za-z0-9+/]{16,}={0,2}(?![\w+/=])"),
    "padding": re.compile(r"(.{1,12}?)\1{15,}|(\S)\2{24,}", re.S),
}


def _decodes_to_text(token: str) -> bool:
    if not (re.search(r"[A-Z]", token) and re.search(r"[a-z]", token)) or len(token.rstrip("=")) % 4 == 1:
        return False
    try:
        raw = base64.b64decode(token + "=" * (-len(token) % 4), validate=True)
        decoded = raw.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return False
    return sum(ch.isprintable() for ch in decoded) >= 0.9 * max(len(decoded), 1)


def injection_flags(text: object) -> list[str]:
    """Why this text reads as talk to its reader (empty: it does not). Reads the sanitized text, and
    flags `lookalike` where sanitizing mapped a mixed-script word."""
    original = str(text or "")
    clean = sanitize(original)
    flags = [name for name, pattern in _PATTERNS.items() if name != "encoded_payload" and pattern.search(clean)]
    if any(_decodes_to_text(m.group(0)) for m in _PATTERNS["encoded_payload"].finditer(clean)):
        flags.append("encoded_payload")
    if _MIXED_WORD.search(_NOT_JAMO.sub(lambda m: unicodedata.normalize("NFKC", m.group(0)),
                                        _INVISIBLE.sub("", original))):
        flags.append("lookalike")
    return flags


def flagged(texts: list[object]) -> list[bool]:
    return [bool(injection_flags(t)) for t in texts]
