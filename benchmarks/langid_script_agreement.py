"""Agreement and cost of `langid.script_shortcut` ({ko: 0.9}) against fastText lid.176 on real Korean data.

    .venv/bin/python benchmarks/langid_script_agreement.py    (needs ../shared/data next to the repo)

Prints, per source: rows, rows the script decides, how many of those fastText labels another language
(with up to four examples to read), and the CPU seconds of each path, measured side by side.
"""

from __future__ import annotations

import csv
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
sys.path.insert(0, str(ROOT))


def sources() -> dict[str, list[str]]:
    def jsonl(path: Path) -> list[dict]:
        return [json.loads(line) for line in path.open(encoding="utf-8")]

    with (SHARED / "ko_chatbot_songys" / "ChatbotData.csv").open(encoding="utf-8") as f:
        chat = list(csv.DictReader(f))
    kin_fields = [v for r in jsonl(SHARED / "ko_naverkin_certifiedjoon" / "dataset.jsonl")
                  for v in r.values() if isinstance(v, str) and len(v) > 5]
    return {
        "bundled sample": [r.get("text") for r in jsonl(ROOT / "lake" / "samples" / "ko_crawl_sample.jsonl")],
        "KiN questions": [r["question"] for r in jsonl(SHARED / "ko_naverkin_certifiedjoon" / "questions_unique.jsonl")],
        "KiN text fields": kin_fields,
        "3i4k": [line.split("\t", 1)[-1].strip()
                 for line in (SHARED / "ko_3i4k" / "fci.txt").read_text(encoding="utf-8").splitlines()],
        "chatbot Q+A": [r["Q"] for r in chat] + [r["A"] for r in chat],
    }


def main() -> None:
    import pyarrow as pa

    from transforms.text.langid import LanguageFilter, predict_languages, script_languages

    stage = LanguageFilter(languages=["ko"])
    stage.setup()
    for name, texts in sources().items():
        t0 = time.process_time()
        by_script, _ = script_languages(pa.array(texts, pa.string()), {"ko": 0.9})
        t1 = time.process_time()
        by_fasttext, scores = predict_languages(stage._model, texts)
        t2 = time.process_time()
        decided = [i for i, lang in enumerate(by_script) if lang]
        differ = [i for i in decided if by_fasttext[i] != "ko"]
        print(f"{name}: rows {len(texts)}; script decides {len(decided)} ({len(decided) / len(texts):.1%}); "
              f"fastText says not ko on {len(differ)} of those; CPU-s script {t1 - t0:.2f} vs fastText {t2 - t1:.2f}")
        for i in differ[:4]:
            print(f"    {by_fasttext[i]} {scores[i]:.3f} {texts[i][:80]!r}")


if __name__ == "__main__":
    main()
