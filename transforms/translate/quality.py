"""The quality figure of a translation engine: chrF (and BLEU) against human references.

Corpora (../shared/data, see its MANIFEST.md), each pair readable in both directions:

* en-hi, en-ta, en-bn: parallel_indic_joshua, `test` split (Wikipedia sentences in the Indian language,
  crowd-translated into English; `.en.0` is the first of four translations). en→xx therefore translates
  a translation back: references are the original Wikipedia sentences.
* en-ja: parallel_en_ja_small `test` (Tanaka corpus; shipped tokenised and lowercased: English is
  detokenised and sentence-cased here, Japanese has its spaces removed).
* en-ko: parallel_en_ko_jungyeul JHE `eval` (short everyday sentences).

A slice is a seeded sample of `limit` sentence pairs (not the file's first lines: the Indic files go
document by document). Failed or empty translations count as empty hypotheses, never skipped.
chrF is sacrebleu's default chrF (character 6-grams, β=2, whitespace ignored), so it needs no
tokeniser for any script; BLEU uses `13a`, or `char` for Japanese, Korean and Chinese targets.
"""

from __future__ import annotations

import os
import random
import re
import time
from pathlib import Path
from typing import Any

from transforms.core.deps import require
from transforms.translate.base import TranslationEngine

DATA_ENV = "PIQAFORGE_SHARED_DATA"
# pair -> (folder, source file, target file, cleaner of source, cleaner of target) for the en->xx direction
CORPORA: dict[str, tuple[str, str, str]] = {
    "en-hi": ("parallel_indic_joshua", "test.hi-en.en.0", "test.hi-en.hi"),
    "en-ta": ("parallel_indic_joshua", "test.ta-en.en.0", "test.ta-en.ta"),
    "en-bn": ("parallel_indic_joshua", "test.bn-en.en.0", "test.bn-en.bn"),
    "en-ja": ("parallel_en_ja_small", "test.en", "test.ja"),
    "en-ko": ("parallel_en_ko_jungyeul", "korean-english-jhe_jhe-koen-eval.en", "korean-english-jhe_jhe-koen-eval.ko"),
}
CHAR_BLEU = {"ja", "ko", "zh"}


def data_root() -> Path:
    env = os.environ.get(DATA_ENV)
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[3] / "shared" / "data"


def known_pairs() -> list[str]:
    return sorted([*CORPORA, *(f"{p.split('-')[1]}-{p.split('-')[0]}" for p in CORPORA)])


def _detok_tanaka_en(line: str) -> str:
    text = re.sub(r" (n't|'(?:s|m|re|ve|ll|d|t))\b", r"\1", line)
    text = re.sub(r" ([.,!?;:%])", r"\1", text)
    text = re.sub(r"\bi\b", "I", text)
    return text[:1].upper() + text[1:]


def _clean(folder: str, lang: str, line: str) -> str:
    line = line.strip()
    if folder == "parallel_en_ja_small":
        return "".join(line.split()) if lang == "ja" else _detok_tanaka_en(line)
    return line


def load_pair(pair: str, *, limit: int | None = 100, seed: int = 0,
              root: str | Path | None = None) -> tuple[list[str], list[str]]:
    """(sources, references) for `pair` ("en-hi", or reversed "hi-en"), a seeded sample of `limit` lines."""
    src, tgt = pair.split("-", 1) if "-" in pair else ("", "")
    forward = f"{src}-{tgt}" in CORPORA
    key = f"{src}-{tgt}" if forward else f"{tgt}-{src}"
    if key not in CORPORA:
        raise ValueError(f"no parallel corpus for {pair!r}; known pairs: {known_pairs()}")
    folder, en_file, xx_file = CORPORA[key]
    base = Path(root) if root else data_root()
    paths = [base / folder / en_file, base / folder / xx_file]
    for p in paths:
        if not p.exists():
            raise FileNotFoundError(f"{p} not found: the parallel corpora live in ../shared/data next to the clone "
                                    f"(or set {DATA_ENV})")
    en_lang, xx_lang = key.split("-")
    en_lines = [_clean(folder, en_lang, x) for x in paths[0].read_text(encoding="utf-8").splitlines()]
    xx_lines = [_clean(folder, xx_lang, x) for x in paths[1].read_text(encoding="utf-8").splitlines()]
    if len(en_lines) != len(xx_lines):
        raise ValueError(f"{paths[0]} and {paths[1]} differ in length ({len(en_lines)} vs {len(xx_lines)})")
    usable = [i for i, (a, b) in enumerate(zip(en_lines, xx_lines, strict=True)) if a and b]
    if limit is not None and limit < len(usable):
        usable = sorted(random.Random(seed).sample(usable, limit))
    sources = [en_lines[i] for i in usable] if forward else [xx_lines[i] for i in usable]
    refs = [xx_lines[i] for i in usable] if forward else [en_lines[i] for i in usable]
    return sources, refs


def score(hypotheses: list[str], references: list[str], tgt: str) -> dict[str, float]:
    sacrebleu = require("sacrebleu", "mt", "the chrF quality figure")
    chrf = sacrebleu.corpus_chrf(hypotheses, [references])
    bleu = sacrebleu.corpus_bleu(hypotheses, [references], tokenize="char" if tgt in CHAR_BLEU else "13a")
    return {"chrf": round(float(chrf.score), 2), "bleu": round(float(bleu.score), 2)}


def evaluate_pair(engine: TranslationEngine, pair: str, *, limit: int | None = 100, seed: int = 0,
                  root: str | Path | None = None, keep_examples: int = 3) -> dict[str, Any]:
    """Translate a slice of `pair`'s corpus with `engine` and score it against the references."""
    src, tgt = pair.split("-", 1)
    sources, refs = load_pair(pair, limit=limit, seed=seed, root=root)
    started = time.perf_counter()
    results = engine.translate_with_status(sources, src, tgt)
    seconds = time.perf_counter() - started
    hyps = [text or "" for text, _ in results]
    failed: dict[str, int] = {}
    for _, why in results:
        if why:
            failed[why] = failed.get(why, 0) + 1
    return {"pair": pair, "n": len(sources), **score(hyps, refs, tgt), "failed": failed,
            "seconds": round(seconds, 1), "model": engine.provenance()["model"], "prompt": engine.provenance()["prompt"],
            "corpus": CORPORA[pair if pair in CORPORA else f"{tgt}-{src}"][0], "seed": seed,
            "examples": [{"source": s, "reference": r, "translation": h}
                         for s, r, h in list(zip(sources, refs, hyps, strict=True))[:keep_examples]]}


def engine_quality(engine: TranslationEngine, pairs: list[str], *, limit: int | None = 100, seed: int = 0,
                   root: str | Path | None = None) -> dict[str, Any]:
    """chrF/BLEU per pair for a run's stats; pairs without a corpus are listed, not scored."""
    scored = [p for p in pairs if p in known_pairs()]
    return {"pairs": {p: evaluate_pair(engine, p, limit=limit, seed=seed, root=root) for p in scored},
            "no_corpus": sorted(set(pairs) - set(scored))}
