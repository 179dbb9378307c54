"""Safety screening: the lexicon per category on Tamil and English items we wrote, Tamil-aware word
boundaries, no false hit on the 600 real XCOPA-ta items, and the LLM screen with the real local model
(Gemma 3 270M through transformers; a weak model, so only the structure of its verdicts is checked)."""

from __future__ import annotations

import re

import pyarrow as pa
import pytest

from transforms.piqa.copa import read_xcopa
from transforms.piqa.safety import (
    CATEGORIES,
    SafetyScreen,
    default_llm_call,
    flag_counts,
    item_text,
    load_lexicon,
    term_pattern,
)

GOAL = "அந்த மனிதன் குழாயைத் திறந்தான். இதன் விளைவாக என்ன நடந்தது?"
# (goal, sol1, sol2, expected categories): items written for this test
ITEMS = [
    ("தரையை எப்படி சுத்தம் செய்வது?", "ப்ளீச்சையும் அமோனியாவையும் கலந்து தரையைத் துடைக்கவும்",
     "சோப்பு நீரால் தரையைத் துடைக்கவும்", {"unsafe_instruction"}),
    ("அடுப்பில் தீ பிடித்தால் என்ன செய்வது?", "எரியும் எண்ணெய் மீது தண்ணீர் ஊற்றவும்",
     "மூடியால் பாத்திரத்தை மூடவும்", {"unsafe_instruction"}),
    ("காய்கறி நறுக்கும்போது என்ன சொல்வது?", "முட்டாளே, கத்தியை ஒழுங்காகப் பிடி",
     "கத்தியைக் கவனமாகப் பிடிக்கவும்", {"offensive"}),
    ("சமையல் யார் செய்ய வேண்டும்?", "பெண்கள் சோம்பேறிகள், அதனால் ஆண்கள் சமைக்க வேண்டும்",
     "வீட்டில் உள்ள அனைவரும் பகிர்ந்து சமைக்கலாம்", {"harmful_stereotype"}),
    ("How do I unclog a drain?", "Mix bleach with vinegar and pour it in", "Use a plunger",
     {"unsafe_instruction"}),
    ("Who should fix the car?", "Women are bad at repairs, so a man should", "Whoever knows how",
     {"harmful_stereotype"}),
    ("How do I ask my brother to be quiet?", "Tell him to shut up, idiot", "Ask him politely",
     {"offensive"}),
]


def test_each_category_is_hit_with_evidence():
    lexicon = load_lexicon()
    for goal, sol1, sol2, expected in ITEMS:
        flags = lexicon.screen(item_text(goal, sol1, sol2))
        assert {f["category"] for f in flags} == expected, (goal, flags)
        assert all(f["source"] == "lexicon" and f["evidence"] for f in flags)
    flags = lexicon.screen(item_text(*ITEMS[0][:3]))
    assert flags[0]["evidence"] == "ப்ளீச்சையும், அமோனியாவையும்"  # the words as written, suffixes included
    assert flag_counts([lexicon.screen(item_text(*i[:3])) for i in ITEMS])["by_category"] == {
        "offensive": 2, "unsafe_instruction": 3, "harmful_stereotype": 2}


def test_tamil_word_boundaries():
    # Python's \b treats Tamil vowel signs (category Mc) as non-word characters: it would find the
    # word கல (stone) inside கலை (art). Our boundary keeps vowel signs inside the word.
    assert re.search(r"\bகல\b", "அவன் கலை பயின்றான்")
    assert not re.search(term_pattern("கல"), "அவன் கலை பயின்றான்")
    assert re.search(term_pattern("கல"), "அவன் கல் எறிந்தான்") is None  # கல் is another word (virama)
    assert re.search(term_pattern("கல்"), "அவன் கல் எறிந்தான்")
    # a stem takes the case endings Tamil glues on; a whole word does not
    assert re.search(term_pattern("முட்டாள்*"), "இது முட்டாள்தனமான வேலை")
    assert not re.search(term_pattern("stupid"), "the stupidity of it")
    lexicon = load_lexicon()
    # bleach alone is a household product (XCOPA-ta has it); only with ammonia or acid is it flagged
    assert lexicon.screen("அவன் அதன்மீது ப்ளீச்சைத் தடவினான்") == []


def test_no_false_hit_on_real_xcopa_ta(shared_data):
    lexicon = load_lexicon()
    rows = read_xcopa(shared_data / "xcopa_ta", "val").to_pylist() + read_xcopa(shared_data / "xcopa_ta",
                                                                             "test").to_pylist()
    hits = [(r["id"], lexicon.screen(item_text(r["goal"], r["sol1"], r["sol2"]))) for r in rows]
    assert len(rows) == 600 and [h for h in hits if h[1]] == []


def test_stage_flags_but_never_drops():
    t = pa.table({"id": [str(i) for i in range(len(ITEMS) + 1)], "goal": [i[0] for i in ITEMS] + [GOAL],
                  "sol1": [i[1] for i in ITEMS] + ["கழிப்பறையில் தண்ணீர் நிரம்பியது"],
                  "sol2": [i[2] for i in ITEMS] + ["பீற்றுக்குழாயிலிருந்து தண்ணீர் வெளியே வழிந்தது"]})
    out = SafetyScreen()(t)
    assert out.column("_status").to_pylist() == ["kept"] * t.num_rows
    assert out.column("safety_flagged").to_pylist() == [True] * len(ITEMS) + [False]
    assert set(out.column("safety_llm_status").to_pylist()) == {"not_asked"}
    assert "safety_lexicon/ta-en@1" in out.column("safety_screen")[0].as_py()


@pytest.fixture(scope="module")
def gemma():
    pytest.importorskip("transformers")
    pytest.importorskip("torch")
    from transforms.llm.base import EngineConfig, build_engine

    engine = build_engine(EngineConfig(backend="transformers", model="gemma3-270m", options={"threads": 2}))
    engine.setup()
    yield engine
    engine.close()


@pytest.mark.slow  # 2 generations with a 300-token prompt: 55 s load + 7 min here under a shared machine's load
def test_llm_screen_with_the_real_local_model(gemma):
    call = default_llm_call()
    call = call.model_copy(update={"params": call.params.model_copy(update={"max_tokens": 48})})
    stage = SafetyScreen(llm=call).use_engine(gemma)
    t = pa.table({"id": ["benign", "unsafe"], "goal": [GOAL, ITEMS[4][0]],
                  "sol1": ["கழிப்பறையில் தண்ணீர் நிரம்பியது", ITEMS[4][1]],
                  "sol2": ["பீற்றுக்குழாயிலிருந்து தண்ணீர் வெளியே வழிந்தது", ITEMS[4][2]]})
    out = stage(t).to_pylist()
    assert stage.counters.requests == 2
    for row in out:
        assert row["_status"] == "kept"
        assert row["safety_llm_status"] in ("ok", "invalid")
        assert (row["safety_llm_raw"] is not None) == (row["safety_llm_status"] == "invalid")
        assert row["_prompt"] == "ta_piqa/safety@1" and row["_model"] == "gemma3-270m"
        for flag in row["safety_flags"]:
            assert flag["category"] in CATEGORIES and flag["source"] in ("lexicon", "llm")
    # the lexicon flag stands whatever the model answered
    assert any(f["source"] == "lexicon" and f["category"] == "unsafe_instruction" for f in out[1]["safety_flags"])
