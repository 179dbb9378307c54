"""False drops and catches of the crawl language filter (`langid`) on short real questions (issue 43 §2).

Rows from ../shared/data (none written by us), up to 1,000 a language, each a short question or sentence:
  ja  JSQuAD valid questions (500) + JCommonsenseQA v1.3 valid questions (500)
  ko  3i4k utterances labelled 2 (500) + Naver KiN question titles, the text before the first ". " (500)
  en  PIQA valid goals (1,000)
  ru  DaNetQA questions (247) + PARus premises (499)
  hi  XQuAD hi questions (1,000)
  bn  Bangla factoid QA questions (1,000)
  ta  XCOPA-ta val+test premises (600)
  zh, es  KoCommonGEN v2's parallel sets, the first sentence (99 each)
Per language L: `langid` with `languages: [L]` over L's rows (a drop is a false drop) and over the other
languages' rows (up to 1,000, taken in turn from each other language; a keep is a miss). Each row is
decided twice: `method: auto` (the default) and `method: fasttext` (lid.176's top language, the stage of
earlier releases, no shortcut).

Then ko-piqa's bundled crawl (4,600 rows after `normalize`) under its pinned `method: fasttext` with
`script_shortcut: {ko: 0.9}` and under `method: auto`: how many rows each drops, and which rows differ.

Run: .venv/bin/python benchmarks/bench_crawl_langid.py  (prints the table and the line docs/stages.md carries)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
PER_LANGUAGE = 1000


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def load_questions(shared: Path = SHARED) -> dict[str, list[str]]:
    q: dict[str, list[str]] = {}
    jsquad = (shared / "ja_jglue" / "jsquad_valid_questions.txt").read_text(encoding="utf-8").splitlines()
    jcqa = _jsonl(shared / "ja_jglue" / "jcommonsenseqa-v1.3" / "valid-v1.3.json")
    q["ja"] = [t for t in jsquad if t.strip()][:500] + [r["question"] for r in jcqa][:500]
    lines = (shared / "ko_3i4k" / "fci.txt").read_text(encoding="utf-8").splitlines()
    utterances = [t.split("\t", 1)[1].strip() for t in lines if t.startswith("2\t")]
    kin = [r["question"].split(". ", 1)[0] for r in _jsonl(shared / "ko_naverkin_certifiedjoon" / "questions_unique.jsonl")]
    q["ko"] = utterances[:500] + kin[:500]
    q["en"] = [r["goal"] for r in _jsonl(shared / "piqa_en" / "valid_labeled.jsonl")][:PER_LANGUAGE]
    ru = shared / "ru_russiansuperglue_humanbench"
    q["ru"] = ([r["question"] for r in _jsonl(ru / "danetqa_unique_questions.jsonl")]
               + [r["premise"] for r in _jsonl(ru / "parus_unique_items.jsonl")])
    squad = json.loads((shared / "xquad" / "xquad.hi.json").read_text(encoding="utf-8"))
    q["hi"] = [qa["question"] for art in squad["data"] for par in art["paragraphs"] for qa in par["qas"]][:PER_LANGUAGE]
    q["bn"] = [r["question"] for r in _jsonl(shared / "bn_factoid_qa" / "bn_questions.jsonl")][:PER_LANGUAGE]
    q["ta"] = [r["premise"] for f in ("data_ta_val.ta.jsonl", "data_ta_test.ta.jsonl")
               for r in _jsonl(shared / "xcopa_ta" / f)]
    for code, name in (("zh", "shuffled_china_1.0.jsonl"), ("es", "shuffled_espanol_1.0.jsonl")):
        q[code] = [r["1"] for r in _jsonl(shared / "ko_commongen_v2" / name)]
    return {k: [t.strip() for t in v if t and t.strip()] for k, v in q.items()}


def others(questions: dict[str, list[str]], lang: str) -> list[str]:
    """Up to PER_LANGUAGE rows of the other languages, one from each in turn."""
    pools = [questions[k] for k in sorted(questions) if k != lang]
    out: list[str] = []
    i = 0
    while len(out) < PER_LANGUAGE and any(i < len(p) for p in pools):
        out += [p[i] for p in pools if i < len(p)]
        i += 1
    return out[:PER_LANGUAGE]


def dropped(texts: list[str], lang: str, method: str) -> list[bool]:
    import pyarrow as pa

    from transforms.text.langid import LanguageFilter

    stage = LanguageFilter(languages=[lang], method=method)
    stage.setup()
    out = stage.process(pa.table({"text": texts}))
    return [r is not None for r in out.column("drop_reason").to_pylist()]


def measure(questions: dict[str, list[str]], method: str) -> dict[str, dict[str, Any]]:
    table = {}
    for lang in sorted(questions):
        own = dropped(questions[lang], lang, method)
        rest = others(questions, lang)
        caught = dropped(rest, lang, method)
        table[lang] = {"rows": len(own), "false_drops": sum(own), "other_rows": len(rest), "caught": sum(caught)}
    return table


def ko_sample_drops() -> tuple[int, int, int, list[str]]:
    """ko-piqa's bundled crawl after `normalize`: rows, drops under its pinned `langid` (method fasttext,
    script_shortcut {ko: 0.9}), drops under `method: auto`, and the texts the two decide differently."""
    import pyarrow as pa

    from transforms.text.langid import LanguageFilter
    from transforms.text.normalize import NormalizeText

    rows = _jsonl(ROOT / "lake" / "samples" / "ko_crawl_sample.jsonl")
    table = NormalizeText().process(pa.table({"id": [r["id"] for r in rows], "text": [r["text"] for r in rows]}))
    out = []
    for stage in (LanguageFilter(languages=["ko"], method="fasttext", script_shortcut={"ko": 0.9}),
                  LanguageFilter(languages=["ko"])):
        stage.setup()
        out.append([r is not None for r in stage.process(table).column("drop_reason").to_pylist()])
    texts = table.column("text").to_pylist()
    differ = [t for t, a, b in zip(texts, out[0], out[1], strict=True) if a != b]
    return len(rows), sum(out[0]), sum(out[1]), differ


def main() -> int:
    sys.path.insert(0, str(ROOT))
    questions = load_questions()
    auto, before = measure(questions, "auto"), measure(questions, "fasttext")
    print("| language | its rows | false drops, auto | rate (fasttext) | other-language rows | caught, auto | rate (fasttext) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for lang, r in auto.items():
        b = before[lang]
        print(f"| {lang} | {r['rows']:,} | {r['false_drops']} | {r['false_drops'] / r['rows']:.2%} "
              f"({b['false_drops'] / b['rows']:.2%}) | {r['other_rows']:,} | {r['caught']:,} | "
              f"{r['caught'] / r['other_rows']:.2%} ({b['caught'] / b['other_rows']:.2%}) |")
    n, pinned, auto, differ = ko_sample_drops()
    print(f"\nko-piqa's bundled crawl ({n:,} rows, after normalize): pinned method drops {pinned}, auto drops {auto}; "
          f"decided differently: {differ}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
