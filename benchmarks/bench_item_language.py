"""False drops and catches of the item language check on real human-written items (issue 32 §3).

Items built from ../shared/data (none written by us), per language:
  ta  XCOPA-ta val+test: premise → goal, the two choices → solutions (600)
  ru  PARus: premise → goal, the two choices (499)
  ja  JCommonsenseQA v1.3 valid: question → goal, choice0/choice1 (one- or two-word nouns) (1,119)
  ko  KoCommonGEN v2: the first sentence → goal, two concept words (one word each) (847)
  en  PIQA valid: goal, sol1, sol2 (1,838)
  hi  XQuAD hi: question → goal, its answer and the next question's answer (short spans) (1,190)
  bn  Bangla factoid QA: question → goal, its answer and the next one's (first 1,000)
  zh, es  KoCommonGEN's parallel sets: the first sentence → goal, the next two → solutions (99 each)
Swapped: every item again with one solution (alternating sol1/sol2) replaced by the same-position
solution of an item of another language (rotating over the others): the check must catch it.

Run: .venv/bin/python benchmarks/bench_item_language.py  (prints the table docs/stages.md carries)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
Item = tuple[str, str, str]


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def _answers(rows: list[tuple[str, str]]) -> list[Item]:
    """Question → goal; its answer and the next row's answer → solutions."""
    return [(q, a, rows[(i + 1) % len(rows)][1]) for i, (q, a) in enumerate(rows)]


def load_items(shared: Path = SHARED) -> dict[str, list[Item]]:
    items: dict[str, list[Item]] = {}
    ta = [r for f in ("data_ta_val.ta.jsonl", "data_ta_test.ta.jsonl") for r in _jsonl(shared / "xcopa_ta" / f)]
    items["ta"] = [(r["premise"], r["choice1"], r["choice2"]) for r in ta]
    parus = _jsonl(shared / "ru_russiansuperglue_humanbench" / "parus_unique_items.jsonl")
    items["ru"] = [(r["premise"], r["choice1"], r["choice2"]) for r in parus]
    jcqa = _jsonl(shared / "ja_jglue" / "jcommonsenseqa-v1.3" / "valid-v1.3.json")
    items["ja"] = [(r["question"], r["choice0"], r["choice1"]) for r in jcqa]
    ko = _jsonl(shared / "ko_commongen_v2" / "korean_commongen_v2_847_shuffled.jsonl")
    items["ko"] = [(r["1"], *r["concept_set"].split("#")[:2]) for r in ko if len(r["concept_set"].split("#")) >= 2]
    items["en"] = [(r["goal"], r["sol1"], r["sol2"]) for r in _jsonl(shared / "piqa_en" / "valid_labeled.jsonl")]
    squad = json.loads((shared / "xquad" / "xquad.hi.json").read_text(encoding="utf-8"))
    hi = [(qa["question"], qa["answers"][0]["text"]) for art in squad["data"] for par in art["paragraphs"]
          for qa in par["qas"] if qa["answers"]]
    items["hi"] = _answers(hi)
    bn = [(r["question"], str(r["answer"])) for r in _jsonl(shared / "bn_factoid_qa" / "bn_questions.jsonl")[:1000]]
    items["bn"] = _answers(bn)
    for code, name in (("zh", "shuffled_china_1.0.jsonl"), ("es", "shuffled_espanol_1.0.jsonl")):
        items[code] = [(r["1"], r["2"], r["3"]) for r in _jsonl(shared / "ko_commongen_v2" / name)]
    return items


def in_its_language(text: str, lang: str) -> bool:
    """A donor solution that is text of its language: letters, most of them in the language's script (an
    XQuAD answer `1946` or `Drogo` in the Hindi set is no Hindi, so it is no swap either; a Japanese
    solution in kanji alone is as Chinese as it is Japanese)."""
    from transforms.text.itemlang import script_share
    from transforms.text.languages import resolve_language

    share = script_share(text, resolve_language(lang).script)
    if lang == "ja":  # kanji alone is Chinese as well (北海道大学): a Japanese donor shows its kana
        return share is not None and share >= 0.5 and any(0x3040 <= ord(c) <= 0x30FF for c in text)
    return share is not None and share >= 0.5


def swapped(items: dict[str, list[Item]]) -> dict[str, list[tuple[Item, str]]]:
    """Per language, its items with one solution taken from another language's item (and that language):
    donors are solutions written in their language (`in_its_language`)."""
    langs = sorted(items)
    donors = {lang: [it for it in items[lang] if in_its_language(it[1], lang) and in_its_language(it[2], lang)]
              for lang in langs}
    out: dict[str, list[tuple[Item, str]]] = {}
    for li, lang in enumerate(langs):
        others = [x for x in langs[li + 1:] + langs[:li]]
        rows = []
        for i, (goal, s1, s2) in enumerate(items[lang]):
            donor = others[i % len(others)]
            d = donors[donor][i % len(donors[donor])]
            rows.append(((goal, d[1], s2) if i % 2 == 0 else (goal, s1, d[2]), donor))
        out[lang] = rows
    return out


def measure(check: Any, items: dict[str, list[Item]]) -> list[dict[str, Any]]:
    """`check(rows, lang) -> list[bool]` (True = dropped). One row of figures per language."""
    table = []
    attacked = swapped(items)
    for lang in sorted(items):
        genuine = check(items[lang], lang)
        caught = check([it for it, _ in attacked[lang]], lang)
        table.append({"lang": lang, "items": len(items[lang]), "false_drops": sum(genuine),
                      "false_drop_rate": sum(genuine) / len(genuine), "swapped": len(caught),
                      "caught": sum(caught), "catch_rate": sum(caught) / len(caught)})
    return table


def item_language_check(rows: list[Item], lang: str, **options: Any) -> list[bool]:
    """The real stage (`item_language`, its defaults) on a table of these items."""
    import pyarrow as pa

    from transforms.piqa.item_checks import ItemLanguageCheck

    stage = ItemLanguageCheck(lang=lang, **options)
    stage.setup()
    batch = pa.table({"goal": [r[0] for r in rows], "sol1": [r[1] for r in rows], "sol2": [r[2] for r in rows]})
    out = stage.process(batch)
    return [r is not None for r in out.column("drop_reason").to_pylist()]


def main() -> int:
    sys.path.insert(0, str(ROOT))
    items = load_items()
    before = {r["lang"]: r for r in measure(lambda rows, lang: item_language_check(rows, lang, method="script"), items)}
    table = measure(item_language_check, items)
    print("| language | genuine items | false drops | rate (per text, before) | swapped items | caught | rate (before) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in table:
        b = before[r["lang"]]
        print(f"| {r['lang']} | {r['items']:,} | {r['false_drops']} | {r['false_drop_rate']:.2%} "
              f"({b['false_drop_rate']:.2%}) | {r['swapped']:,} | {r['caught']:,} | {r['catch_rate']:.2%} "
              f"({b['catch_rate']:.2%}) |")
    g = sum(r["items"] for r in table)
    print(f"| all | {g:,} | {sum(r['false_drops'] for r in table)} | "
          f"{sum(r['false_drops'] for r in table) / g:.2%} | {g:,} | {sum(r['caught'] for r in table):,} | "
          f"{sum(r['caught'] for r in table) / g:.2%} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
