"""The contrast between two solutions, on real Tamil pairs (XCOPA-ta choices and edits of them),
plus Russian and English pairs: every kind, its word-level edit distance and the tokenizer hook."""

from __future__ import annotations

import pyarrow as pa
import pytest

from transforms.piqa.contrast import (
    CONTRAST_TYPES,
    ContrastClassifier,
    classify_contrast,
    contrast_distribution,
)
from transforms.text import textcheck as tc

# (sol1, sol2, kind, word-level distance). Tamil: first from XCOPA-ta as it is, the others are
# XCOPA-ta choices with the one edit the kind names.
PAIRS = [
    # real XCOPA-ta pair (val idx 0): two different sentences
    ("கழிப்பறையில் தண்ணீர் நிரம்பியது", "பீற்றுக்குழாயிலிருந்து தண்ணீர் வெளியே வழிந்தது", "other", 3),
    # real XCOPA-ta pair: one word differs
    ("முட்டை உடைந்தது", "முட்டை அழுகியது", "word_substitution", 1),
    ("அவள் கிண்ணத்தில் பாலை ஊற்றினாள்", "அவள் பாலை கிண்ணத்தில் ஊற்றினாள்", "word_swap", 2),
    ("அடுத்த நாள் அவன் தலை வலித்தது", "அவன் தலை அடுத்த நாள் வலித்தது", "phrase_reorder", 4),
    ("நான் காலி அறையின் தரையைப் பெருக்கினேன்", "நான் அறையின் தரையைப் பெருக்கினேன்", "word_added_removed", 1),
    ("அவள் தன் பசியை இழந்தாள்", "அவள் தன் பசியை இழந்தாள்.", "identical", 0),
    ("Налейте воду в кастрюлю и посолите", "Налейте масло в кастрюлю и посолите", "word_substitution", 1),
    ("Положите яйца в холодную воду", "Положите в холодную воду яйца", "phrase_reorder", 2),
    ("Wrap the ice in a towel", "Wrap the ice in a wet towel", "word_added_removed", 1),
    ("Stir the paint then open the can", "Open the can then stir the paint", "phrase_reorder", 4),
    ("Stir the soup with a spoon", "Shake the pot until it mixes", "other", 5),
    ("Put the salt before the sugar", "Put the sugar before the salt", "word_swap", 2),
]


@pytest.mark.parametrize(("sol1", "sol2", "kind", "distance"), PAIRS)
def test_each_kind_with_its_distance(sol1, sol2, kind, distance):
    got = classify_contrast(sol1, sol2)
    assert (got.kind, got.distance) == (kind, distance)
    # the distance is the word-level Levenshtein the minimal-pair gate uses
    assert got.distance == tc.levenshtein(tc.words(sol1), tc.words(sol2))


def test_details_name_the_words():
    assert classify_contrast("முட்டை உடைந்தது", "முட்டை அழுகியது").detail == "உடைந்தது → அழுகியது"
    added = classify_contrast("நான் அறையின் தரையைப் பெருக்கினேன்", "நான் காலி அறையின் தரையைப் பெருக்கினேன்")
    assert added.detail == "+காலி"
    swap = classify_contrast("Put the salt before the sugar", "Put the sugar before the salt")
    assert swap.detail == "salt ↔ sugar"


def test_tamil_words_keep_their_vowel_signs():
    # a whitespace word keeps its combining vowel signs and virama: 4 words, not split inside
    assert tc.words("அவள் கிண்ணத்தில் பாலை ஊற்றினாள்") == ["அவள்", "கிண்ணத்தில்", "பாலை", "ஊற்றினாள்"]


def test_substitution_limit_and_tokenizer_hook():
    two = ("அவன் தலை வலித்தது", "அவள் கால் வலித்தது")
    assert classify_contrast(*two).kind == "other"
    assert classify_contrast(*two, max_substitutions=2).kind == "word_substitution"
    # a tokenizer is a plain function: by characters, "abc" / "acb" is a swap of two characters
    assert classify_contrast("abc", "acb", tokenize=list).kind == "word_swap"


def test_stage_writes_three_columns_and_drops_nothing():
    t = pa.table({"id": [str(i) for i in range(len(PAIRS))], "lang": ["ta"] * len(PAIRS),
                  "sol1": [p[0] for p in PAIRS], "sol2": [p[1] for p in PAIRS]})
    out = ContrastClassifier()(t)
    assert out.column("contrast_type").to_pylist() == [p[2] for p in PAIRS]
    assert out.column("contrast_distance").to_pylist() == [p[3] for p in PAIRS]
    assert out.column("_status").to_pylist() == ["kept"] * len(PAIRS)
    dist = contrast_distribution(out.column("contrast_type").to_pylist())
    assert list(dist) == list(CONTRAST_TYPES) and sum(dist.values()) == len(PAIRS)


def test_xcopa_ta_contrasts(shared_data):
    """On the real 600 XCOPA-ta items, solutions are whole alternative sentences: mostly `other`."""
    from transforms.piqa.copa import read_xcopa

    rows = read_xcopa(shared_data / "xcopa_ta", "val").to_pylist() + read_xcopa(shared_data / "xcopa_ta",
                                                                             "test").to_pylist()
    dist = contrast_distribution([classify_contrast(r["sol1"], r["sol2"]).kind for r in rows])
    # independent count of the one-word substitutions: same length, exactly one position differs
    subs = sum(1 for r in rows if len(a := tc.words(r["sol1"])) == len(b := tc.words(r["sol2"]))
               and sum(x != y for x, y in zip(a, b, strict=True)) == 1)
    assert dist["word_substitution"] == subs == 30
    assert dist["other"] == 570 and sum(dist.values()) == 600
