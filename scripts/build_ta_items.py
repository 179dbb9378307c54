"""Build `lake/samples/ta_items/`: pseudo writer files of PIQA-shaped Tamil items from XCOPA-ta.

    .venv/bin/python scripts/build_ta_items.py [--data ../shared/data/xcopa_ta] [--out lake/samples/ta_items]

What the files are, honestly: XCOPA-ta (cambridgeltl/xcopa, CC BY 4.0) is a Tamil translation of
COPA, not PIQA and not written by our writers. Each COPA item (premise, cause/effect question,
two alternatives) becomes a PIQA-shaped item exactly as transforms/piqa/copa.py does it: goal =
premise + the question in Tamil ("இதற்கான காரணம் என்ன?" / "இதன் விளைவாக என்ன நடந்தது?"),
sol1/sol2 = the two alternatives, label unchanged. The 600 items (val 100 + test 500, in that
order) are dealt round-robin to four pseudo writers, one file format each. On top, written for
the intake and dedup tests and listed in the README:

* writer_d re-submits 3 items of other writers verbatim, 3 with a small edit, and 3 paraphrases
  that we wrote in Tamil (same meaning, different words);
* 12 rows are damaged on purpose (wrong field count, empty solution, bad label, invalid UTF-8,
  mojibake, English text, broken JSON, identical solutions, a stray BOM, a repeated item number).

The output is byte-for-byte reproducible (the XLSX zip gets fixed timestamps).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = {"cause": "இதற்கான காரணம் என்ன?", "effect": "இதன் விளைவாக என்ன நடந்தது?"}
HEADER = ["item_no", "writer", "goal", "sol1", "sol2", "label", "source", "xcopa_id"]
WRITERS = ("writer_a", "writer_b", "writer_c", "writer_d")
EXACT = ("val-0002", "val-0005", "val-0006")  # re-submitted verbatim by writer_d
# (original, field, old, new): small edits a writer might make to someone else's item
NEAR = (("val-0001", "goal", "அந்த சிறுமி தன் காலை உணவில் பூச்சியைக்", "அந்தச் சிறுமி தன் காலை உணவில் ஒரு பூச்சியைக்"),
        ("val-0004", "goal", "அந்த அடையிலிருந்த மாமிசம் பொன்னிறமானது", "அடையிலிருந்த மாமிசம் பொன்னிறமாக மாறியது"),
        ("val-0008", "sol1", "உதினேன்", "ஊதினேன்"))
# Paraphrases written for piqaforge (same item, other words); the originals are val 0, 9, 12.
PARAPHRASES = (
    ("val-0000", "ஒருவன் தண்ணீர்க் குழாயைத் திறந்து விட்டான். இதன் விளைவாக என்ன நடந்தது?",
     "கழிவறை முழுவதும் தண்ணீரால் நிறைந்தது", "குடுவையிலிருந்து தண்ணீர் வழிந்து ஓடியது"),
    ("val-0009", "விருந்தில் அவன் அளவுக்கு மீறி மது குடித்தான். இதன் விளைவாக என்ன நடந்தது?",
     "மறுநாள் அவனுக்குத் தலைவலி ஏற்பட்டது", "மறுநாள் அவனுக்கு மூக்கு ஒழுகியது"),
    ("val-0012", "எனது கணினி திடீரென்று வேலை செய்யாமல் போனது. இதன் விளைவாக என்ன நடந்தது?",
     "நான் புதிய ஸ்பீக்கர்களைப் பொருத்தினேன்", "கணினியில் இருந்த என் தரவுகள் எல்லாம் அழிந்துவிட்டன"),
)


def copa_items(data: Path) -> list[dict[str, Any]]:
    items = []
    for split in ("val", "test"):
        with open(data / f"data_ta_{split}.ta.jsonl", encoding="utf-8") as f:
            for line in f:
                r = json.loads(line)
                premise = r["premise"].strip()
                premise = premise if re.search(r"[.!?]$", premise) else premise + "."
                items.append({"goal": f"{premise} {QUESTIONS[r['question']]}", "sol1": r["choice1"].strip(),
                              "sol2": r["choice2"].strip(), "label": str(r["label"]),
                              "source": f"xcopa-ta-{split}", "xcopa_id": f"{split}-{r['idx']:04d}"})
    return items


def english_premises(data: Path) -> dict[str, str]:
    with open(data / "data-gmt_ta_val.ta.jsonl", encoding="utf-8") as f:
        return {f"val-{r['idx']:04d}": r["premise"] for r in map(json.loads, f)}


def mojibake(text: str) -> str:
    """`text` as a tool that reads UTF-8 as cp1252 shows it (undefined bytes as latin-1)."""
    out = []
    for b in text.encode("utf-8"):
        try:
            out.append(bytes([b]).decode("cp1252"))
        except UnicodeDecodeError:
            out.append(chr(b))
    return "".join(out)


def deal(items: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    files: dict[str, list[dict[str, Any]]] = {w: [] for w in WRITERS}
    for k, item in enumerate(items):
        writer = WRITERS[k % len(WRITERS)]
        files[writer].append({**item, "writer": writer, "item_no": str(len(files[writer]) + 1)})
    by_id = {i["xcopa_id"]: i for i in items}
    planted = files["writer_d"]
    for xid in EXACT:
        planted.append({**by_id[xid], "writer": "writer_d", "item_no": str(len(planted) + 1)})
    for xid, field, old, new in NEAR:
        item = dict(by_id[xid])
        assert old in item[field], (xid, old)
        item[field] = item[field].replace(old, new)
        planted.append({**item, "writer": "writer_d", "item_no": str(len(planted) + 1),
                        "source": "written-near-copy"})
    for xid, goal, sol1, sol2 in PARAPHRASES:
        planted.append({**by_id[xid], "goal": goal, "sol1": sol1, "sol2": sol2, "writer": "writer_d",
                        "item_no": str(len(planted) + 1), "source": "written-paraphrase"})
    return files


def damage(files: dict[str, list[dict[str, Any]]], english: dict[str, str]) -> None:
    """Deliberately malformed rows (the 30th, 60th, 90th ... item of a writer is replaced)."""
    a, b, c, d = (files[w] for w in WRITERS)
    a[59]["sol2"] = ""                                   # empty_field
    a[89]["label"] = "2"                                 # bad_label
    b[29]["goal"] = mojibake(b[29]["goal"])              # mojibake
    b[59]["goal"] = english["val-0049"] + ". What happened as a result?"  # not_in_script (real MT English)
    c[29]["sol2"] = c[29]["sol1"]                        # identical_solutions
    c[59]["goal"] = "\ufeff" + c[59]["goal"]             # stray_bom (two files pasted together)
    d[29]["label"] = "yes"                               # bad_label
    d[59]["goal"] = ""                                   # empty_field
    d[89]["item_no"] = d[88]["item_no"]                  # duplicate_id


def delimited(rows: list[dict[str, Any]], delimiter: str) -> bytes:
    buf = io.StringIO(newline="")
    w = csv.writer(buf, delimiter=delimiter, lineterminator="\n")
    w.writerow(HEADER)
    for r in rows:
        w.writerow([r[h] for h in HEADER])
    return buf.getvalue().encode("utf-8")


def write_files(files: dict[str, list[dict[str, Any]]], out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    # writer_a: CSV as Excel saves it (UTF-8 with a BOM), plus a row with an unquoted comma in a solution
    a = delimited(files["writer_a"], ",")
    lines = a.split(b"\n")
    r = files["writer_a"][29]
    lines[30] = ",".join([r["item_no"], "writer_a", r["goal"], r["sol1"].replace(" ", ", ", 1), r["sol2"],
                          r["label"], r["source"], r["xcopa_id"]]).encode("utf-8")  # malformed_row
    (out / "writer_a.csv").write_bytes(b"\xef\xbb\xbf" + b"\n".join(lines))
    # writer_b: TSV, one goal cut in the middle of a Tamil character (invalid_utf8)
    b = delimited(files["writer_b"], "\t")
    goal = files["writer_b"][89]["goal"].encode("utf-8")
    (out / "writer_b.tsv").write_bytes(b.replace(goal, goal[:10] + goal[11:], 1))
    # writer_c: JSON Lines, one line with its closing brace lost
    lines_c = [json.dumps({h: r[h] for h in HEADER}, ensure_ascii=False) for r in files["writer_c"]]
    lines_c[89] = lines_c[89][:-1]
    (out / "writer_c.jsonl").write_text("\n".join(lines_c) + "\n", encoding="utf-8")
    # writer_d: XLSX without a writer column (the writer is the file name)
    write_xlsx(files["writer_d"], out / "writer_d.xlsx", [h for h in HEADER if h != "writer"])
    return sorted(out.glob("writer_*"))


def write_xlsx(rows: list[dict[str, Any]], path: Path, header: list[str]) -> None:
    import openpyxl

    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "items"
    ws.append(header)
    for r in rows:
        ws.append([int(r[h]) if h == "item_no" else r[h] for h in header])
    buf = io.BytesIO()
    wb.save(buf)
    # fixed timestamps (zip entries and the document properties) so that a rebuild is byte-identical
    with zipfile.ZipFile(buf) as src, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            data = src.read(info.filename)
            if info.filename == "docProps/core.xml":
                data = re.sub(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", b"2026-01-01T00:00:00Z", data)
            dst.writestr(zipfile.ZipInfo(info.filename, (2026, 1, 1, 0, 0, 0)), data, zipfile.ZIP_DEFLATED)


def build(data: Path, out: Path) -> list[Path]:
    files = deal(copa_items(data))
    damage(files, english_premises(data))
    return write_files(files, out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "xcopa_ta")
    parser.add_argument("--out", type=Path, default=ROOT / "lake" / "samples" / "ta_items")
    args = parser.parse_args()
    for path in build(args.data, args.out):
        print(f"{path} {path.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
