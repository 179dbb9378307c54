"""Segment → translate → reassemble: long texts go to the model one sentence at a time.

MT models are trained on sentences and degrade (or truncate) on paragraphs, and a sentence is the
unit worth caching: the same sentence in two items is translated once. `split` cuts a text into
sentences and keeps what stood between them; `join` puts translated sentences back with the same
separators (newlines stay newlines; a single space becomes nothing for scripts without spaces).
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from transforms.translate.languages import writes_without_spaces

# A sentence ends at . ! ? (Latin), । ॥ (Devanagari, Bengali), 。！？ (CJK) plus closing quotes or
# brackets; Latin enders need whitespace after them, CJK ones do not. Newlines always end one.
_END = re.compile(r"""(?:(?<=[.!?…])["'”’)\]]*\s+|(?<=[।॥])["'”’)\]]*\s*|(?<=[。！？])[」』”’）)]*\s*|\s*\n\s*)""")
# "e.g. x", "Mr. Kim", "3. Stir": a period after these is not a sentence end.
_NO_BREAK = re.compile(r"(?:\b(?:e\.g|i\.e|etc|vs|mr|mrs|ms|dr|st|no|approx|cf)\.|\b[A-Za-z]\.|\b\d+\.)$",
                       re.IGNORECASE)
_SOFT = re.compile(r"(?<=[,;:،、])\s+")


class Segmenter(BaseModel):
    """How texts are cut into segments before they reach the model."""

    enabled: bool = Field(True, description="Split texts into sentences (off: one segment per text).")
    max_chars: int = Field(600, ge=16, description="Segments longer than this are cut again at commas, "
                           "then at spaces, so no segment exceeds it (the model's input guard comes on top).")

    def split(self, text: str) -> tuple[list[str], list[str]]:
        """(segments, separators): `text` == s0 + sep0 + s1 + sep1 + ... + s_last (modulo outer spaces)."""
        text = text.strip()
        if not text:
            return [], []
        pieces: list[str] = [text]
        seps: list[str] = []
        if self.enabled:
            pieces, seps = _split_sentences(text)
        segments: list[str] = []
        separators: list[str] = []
        for k, piece in enumerate(pieces):
            parts = _cut_long(piece, self.max_chars)
            segments.extend(parts)
            separators.extend([" "] * (len(parts) - 1))
            if k < len(seps):
                separators.append(seps[k])
        return segments, separators

    def join(self, segments: list[str], separators: list[str], target_lang: str) -> str:
        out: list[str] = []
        for k, segment in enumerate(segments):
            out.append(segment.strip())
            if k < len(separators):
                sep = separators[k]
                if "\n" in sep:
                    out.append("\n" * sep.count("\n"))
                else:
                    out.append("" if writes_without_spaces(target_lang) else " ")
        return "".join(out).strip()


def _split_sentences(text: str) -> tuple[list[str], list[str]]:
    pieces: list[str] = []
    seps: list[str] = []
    start = 0
    for m in _END.finditer(text):
        end = m.start()
        if m.end() == start or end == 0:
            continue
        # closing quotes belong to the sentence they close
        closing = re.match(r"""["'”’)\]」』）]*""", m.group(0)).group(0)  # type: ignore[union-attr]
        candidate = text[start:end + len(closing)]
        if "\n" not in m.group(0) and _NO_BREAK.search(candidate.rstrip()):
            continue
        if candidate.strip():
            pieces.append(candidate.strip())
            seps.append(m.group(0)[len(closing):] or "")
        start = m.end()
    tail = text[start:].strip()
    if tail:
        pieces.append(tail)
    elif seps:
        seps.pop()
    return pieces, seps


def _cut_long(piece: str, limit: int) -> list[str]:
    if len(piece) <= limit:
        return [piece]
    parts: list[str] = []
    current = ""
    for chunk in _SOFT.split(piece):
        for word_chunk in _hard_cut(chunk, limit):
            joined = f"{current} {word_chunk}" if current else word_chunk
            if len(joined) <= limit:
                current = joined
            else:
                parts.append(current)
                current = word_chunk
    if current:
        parts.append(current)
    return parts


def _hard_cut(chunk: str, limit: int) -> list[str]:
    """Cut at the last space before `limit` (at `limit` itself when there is none, e.g. in Japanese)."""
    out = []
    while len(chunk) > limit:
        cut = chunk.rfind(" ", 0, limit + 1)
        cut = cut if cut > 0 else limit
        out.append(chunk[:cut].strip())
        chunk = chunk[cut:].strip()
    if chunk:
        out.append(chunk)
    return out
