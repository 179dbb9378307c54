"""Item checks on the bundled Tamil items: prompt length (the 25-word guideline), openings per writer,
and the card statistics, each against a count made here independently."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from transforms.io.writers_intake import WriterColumns, WritersIntake
from transforms.piqa.contrast import ContrastClassifier
from transforms.piqa.item_card import card_statistics
from transforms.piqa.item_checks import OpeningVariety, PromptLengthCheck, length_report
from transforms.piqa.safety import SafetyScreen

ITEMS = Path(__file__).resolve().parents[3] / "lake" / "samples" / "ta_items"
# a goal we wrote to the guideline's length (33 words)
LONG_GOAL = ("மழைக்காலத்தில் வீட்டின் மேற்கூரையிலிருந்து தண்ணீர் சொட்டுகிறது, தரையில் வைத்த வாளி சில மணி நேரத்தில் "
             "நிரம்பிவிடுகிறது, கூரை ஓடுகளை மாற்ற ஆள் கிடைக்க இன்னும் இரண்டு நாட்கள் ஆகும் என்றால், அதுவரை "
             "தண்ணீர் அறைக்குள் பரவாமல் இருக்க வீட்டில் இருக்கும் பொருட்களை வைத்து என்ன செய்யலாம்?")


@pytest.fixture(scope="module")
def items() -> pa.Table:
    t = WritersIntake(path=str(ITEMS), allow_malformed=True, columns=WriterColumns(id="item_no", source="source")).rows()
    return t.filter(pc.is_null(t.column("drop_reason")))


def test_prompt_length_flags_short_goals_without_dropping(items):
    out = PromptLengthCheck()(items)
    words = [len(g.split()) for g in items.column("goal").to_pylist()]  # independent: Tamil has no stray punctuation words
    assert out.column("goal_words").to_pylist() == words
    assert out.column("short_prompt").to_pylist() == [w <= 25 for w in words]
    assert set(out.column("_status").to_pylist()) == {"kept"}
    report = length_report(items.column("goal").to_pylist(), "ta")
    # COPA premises are short: no bundled goal reaches the guideline (measured: 5-15 words, mean 8.6)
    assert report["over"] == 0 and report["share_over"] == 0.0 and report["flagged_short"] == items.num_rows
    assert (report["words"]["min"], report["words"]["max"]) == (min(words), max(words))
    assert len(LONG_GOAL.split()) == 33
    assert length_report([LONG_GOAL, "அவன் கதவைத் திறந்தான்."], "ta")["share_over"] == 0.5


def test_openings_per_writer(items):
    out = OpeningVariety()(items)
    rows = out.to_pylist()
    per_writer = Counter(r["writer_id"] for r in rows)
    firsts = Counter((r["writer_id"], r["goal"].split()[0]) for r in rows)
    for r in rows:
        n = firsts[(r["writer_id"], r["goal"].split()[0])]
        assert r["opening_repeats"] == n
        assert r["repeated_opening"] == (n >= 3 and n / per_writer[r["writer_id"]] > 0.2)
    # XCOPA-ta starts half its premises with அந்த ("that/the"): flagged for every writer
    flagged = {(r["writer_id"], r["opening"]) for r in rows if r["repeated_opening"]}
    assert {w for w, o in flagged if o == "அந்த"} == {"writer_a", "writer_b", "writer_c", "writer_d"}
    assert set(out.column("_status").to_pylist()) == {"kept"}


def test_card_statistics(items):
    t = ContrastClassifier()(items)
    t = SafetyScreen()(t.drop_columns(["drop_reason", "drop_stage", "_status"]))
    agreement = {"unanimous_share": None, "fleiss_kappa": None, "source": "review not run"}
    stats = card_statistics(t, agreement=agreement)
    assert stats["items"] == items.num_rows == 597
    assert sum(stats["contrast_types"].values()) == 597
    assert stats["contrast_types"]["word_substitution"] == sum(
        1 for r in t.to_pylist() if r["contrast_type"] == "word_substitution")
    assert stats["safety_flags"]["items_flagged"] == 0  # the lexicon hits nothing in XCOPA-ta
    assert stats["writers"] == {"writer_a": 147, "writer_b": 147, "writer_c": 147, "writer_d": 156}
    assert stats["labels"]["0"] + stats["labels"]["1"] == 597
    assert stats["agreement"] == agreement
    assert stats["prompt_length"]["words"]["mean"] == pytest.approx(
        sum(len(g.split()) for g in items.column("goal").to_pylist()) / 597, abs=0.01)
