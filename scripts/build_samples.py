"""Build the bundled samples in lake/samples/ from ../shared/data (reproducible, fixed seed).

ko_crawl_sample.jsonl: a few thousand real Korean questions shaped like a Q&A crawl:
  * every Naver KiN Q/A row (questions repeat across answers, so the crawl has real exact dups),
  * negatives: 3i4k questions (label 2) and commands (label 3), chatbot chit-chat,
  * a little foreign-language noise (English PIQA goals, Japanese JSQuAD questions) for language ID.
"""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
OUT = ROOT / "lake" / "samples"


def main() -> None:
    rng = random.Random(20261122)
    rows: list[dict] = []
    with open(DATA / "ko_naverkin_certifiedjoon" / "dataset.jsonl", encoding="utf-8") as f:
        for i, line in enumerate(f):
            d = json.loads(line)
            rows.append({"id": f"kin-{i:05d}", "text": d["Instruction"], "source": "naver_kin",
                         "url": d.get("MetaData")})
    fci = [line.rstrip("\n").split("\t", 1) for line in open(DATA / "ko_3i4k" / "fci.txt", encoding="utf-8")]
    questions = [t for lab, t in fci if lab == "2" and len(t) >= 8]
    commands = [t for lab, t in fci if lab == "3" and len(t) >= 8]
    for i, t in enumerate(rng.sample(questions, 1500)):
        rows.append({"id": f"3i4k-q-{i:05d}", "text": t, "source": "3i4k", "url": None})
    for i, t in enumerate(rng.sample(commands, 300)):
        rows.append({"id": f"3i4k-c-{i:05d}", "text": t, "source": "3i4k", "url": None})
    with open(DATA / "ko_chatbot_songys" / "ChatbotData.csv", encoding="utf-8") as f:
        chat = [r["Q"] for r in csv.DictReader(f)]
    for i, t in enumerate(rng.sample(chat, 1000)):
        rows.append({"id": f"chatbot-{i:05d}", "text": t, "source": "chatbot_songys", "url": None})
    piqa = [json.loads(x)["goal"] for x in open(DATA / "piqa_en" / "valid_labeled.jsonl", encoding="utf-8")] \
        if (DATA / "piqa_en" / "valid_labeled.jsonl").exists() else []
    for i, t in enumerate(rng.sample(piqa, min(40, len(piqa)))):
        rows.append({"id": f"piqa-en-{i:05d}", "text": t, "source": "piqa_en", "url": None})
    ja = [x.strip() for x in open(DATA / "ja_jglue" / "jsquad_valid_questions.txt", encoding="utf-8") if x.strip()]
    for i, t in enumerate(rng.sample(ja, 40)):
        rows.append({"id": f"jsquad-{i:05d}", "text": t, "source": "jsquad", "url": None})
    rng.shuffle(rows)
    OUT.mkdir(parents=True, exist_ok=True)
    with open(OUT / "ko_crawl_sample.jsonl", "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(f"wrote {len(rows)} rows to {OUT / 'ko_crawl_sample.jsonl'}")


if __name__ == "__main__":
    main()
