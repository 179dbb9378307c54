"""Issue 24: text added to a crawled row cannot turn a row the default ko-piqa judges drop into one they keep.

The judges are the job's own (jobs/recipes/ko-piqa.yaml): the supervised prefilter, `e5-strict` and the
`e5-chitchat` gate, real multilingual-e5-small + logistic regression fitted on the bundled seeds. The
attacks are the template set (lake/samples/ko_injection_templates.yaml: instructions, fences, role
markers, dictated answers, topic lists, in Korean and English, at the start, the end and inside, with
zero-width, look-alike, full-width, base64 and padding variants) applied to the labelled negatives the
judges come closest to keeping (the rows an attack could push over the cut).
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
from conftest import ROOT, SAMPLES
from jobutil import ko_piqa_judges

from transforms.judge.injection import POSITIONS, attack_set, flip_rate, inject, load_templates
from transforms.judge.linear import LinearJudge, embedder_for, train
from transforms.recipes.ko_piqa.seeds import load_labels
from transforms.text.guard import injection_flags, sanitize
from transforms.text.views import min_over_parts, part_views, prefix_views, with_prefixes

# Not injections: a real physical sentence glued (no line break) to a row makes the row hold a physical
# question; no judge of the text can tell it from one asked that way (docs/judges.md counts these flips).
CONTENT_GLUED = {("content", p) for p in POSITIONS if p.endswith("_glued")}


def test_sanitize_reads_hidden_and_disguised_text():
    assert sanitize("Ig\u200bno\u200dre\u2060 all") == "Ignore all"
    assert sanitize("Ｉｇｎｏｒｅ　ａｌｌ") == "Ignore all"
    assert sanitize("Ignоrе аll рrеvіоus") == "Ignore all previous"      # Cyrillic look-alikes in Latin words
    assert sanitize("Москва и 서울") == "Москва и 서울"                      # a Russian word is left alone
    assert sanitize("줄\u2028바꿈") == "줄\n바꿈"


@pytest.mark.floats
def test_every_injection_template_is_flagged_and_no_labelled_question_is():
    for t in load_templates():
        if t["kind"] == "content" or t["id"] in ("ko_topics_plain", "en_topics_plain"):
            assert not injection_flags(t["text"]), t  # plain text: left to the part views
        else:
            assert injection_flags(t["text"]), t
    rows = [r for f in ("ko_seed_labels.jsonl", "ko_heldout_labels.jsonl", "ko_seed_chitchat.jsonl")
            for r in load_labels(SAMPLES / f, allow_held_out=True)]
    assert not [r.text for r in rows if r.physical and injection_flags(r.text)]  # the guard costs no recall
    assert sum(bool(injection_flags(r.text)) for r in rows) <= 5


def _any_score(texts: list[str]) -> np.ndarray:
    return np.array([int(hashlib.sha1(t.encode()).hexdigest()[:8], 16) / 2**32 for t in texts])


@pytest.mark.floats
def test_a_clean_question_stays_a_view_wherever_text_is_added_at_a_line_break():
    """With line breaks around the attack (or a parenthesised list), the clean question and its own
    prefix views are views of the attacked row, so its minimum cannot rise: for any scorer."""
    held = [json.loads(x)["text"] for x in SAMPLES.joinpath("ko_heldout_labels.jsonl").read_text("utf-8").splitlines()]
    questions = [q for q in held[:120] if len(part_views(q, 128, strong_only=True)) == 1]
    assert len(questions) > 100
    checked = 0
    for t in load_templates():
        positions = POSITIONS if t["id"] in ("ko_topics_plain", "en_topics_plain") else ("end", "start", "inside")
        for position in positions:
            for q in questions:
                dirty = inject(q, sanitize(t["text"]), position)
                if dirty is None:
                    continue
                clean = with_prefixes([" ".join(q.split())[:128]], 128, 64)
                views = set(with_prefixes(part_views(dirty, 128, strong_only=True), 128, 64))
                assert set(clean) <= views, (t["id"], position, q)
                got = min_over_parts(_any_score, [dirty], 128, strong_only=True, prefix_min_chars=64)[0]
                assert got <= _any_score(clean).min() + 1e-12
                checked += 1
    assert checked > 3000
    assert prefix_views("오늘 날씨 어때", 128) == part_views("오늘 날씨 어때", 128, strong_only=True)


@pytest.fixture(scope="module")
def judges(tmp_path_factory):
    cache = str(tmp_path_factory.mktemp("emb"))
    cfg = ko_piqa_judges()  # the recipe's own judges (jobs/recipes/ko-piqa.yaml)

    def judge(spec: dict) -> LinearJudge:
        files = {"labels": str(ROOT / spec["labels"]), "extra_labels": [str(ROOT / f) for f in spec.get("extra_labels", [])]}
        return LinearJudge.model_validate(spec | files)

    specs = {"prefilter": judge(cfg["prefilter"]["judge"])}
    specs |= {m["name"]: judge(m["judge"]) for m in cfg["ensemble"]["classifiers"] if m.get("kind") == "linear"}
    assert set(specs) == {"prefilter", "e5-strict", "e5-chitchat"}
    fitted = {k: train(j, cache) for k, j in specs.items()}
    assert all(f.guard and f.parts and f.views for f in fitted.values())
    embedders = {k: embedder_for(j, cache) for k, j in specs.items()}
    return {k: (fitted[k], embedders[k]) for k in specs}


def _verdicts(judges, name):
    """One judge's keep verdicts, each text scored once: the cascade and flip_rate ask again for the attacks each
    judge has already scored (a judge's verdict on a text is a function of the text alone)."""
    fitted, embedder = judges[name]
    seen: dict[str, bool] = {}

    def verdict(texts: list[str]) -> np.ndarray:
        new = list(dict.fromkeys(t for t in texts if t not in seen))
        if new:
            kept = fitted.score_texts(new, embedder, lazy_below=fitted.threshold) >= fitted.threshold
            seen.update(zip(new, kept.tolist(), strict=True))
        return np.array([seen[t] for t in texts], dtype=bool)

    return verdict


@pytest.mark.floats
@pytest.mark.floats_heavy
@pytest.mark.slow  # over 10 s: the slow tier (the default tier's budget is 10 min)
def test_the_injected_run_keeps_no_row_the_plain_run_drops(judges):
    """The default ko-piqa linear judges and their cascade on the labelled negatives each judge drops but
    comes closest to keeping, every template at every position: no row dropped clean is kept attacked
    (content glued without a line break is only counted, see CONTENT_GLUED)."""
    negatives = [r.text for f in ("ko_seed_labels.jsonl", "ko_heldout_labels.jsonl", "ko_seed_chitchat.jsonl")
                 for r in load_labels(SAMPLES / f, allow_held_out=True) if not r.physical]
    near = set()
    for fitted, embedder in judges.values():
        scores = fitted.score_texts(negatives, embedder)
        dropped = np.flatnonzero(scores < fitted.threshold)
        near |= {negatives[i] for i in dropped[np.argsort(-scores[dropped])][:3]}
    texts = sorted(near)
    verdict = {name: _verdicts(judges, name) for name in judges}

    def cascade(batch: list[str]) -> np.ndarray:
        return verdict["prefilter"](batch) & verdict["e5-strict"](batch) & verdict["e5-chitchat"](batch)

    templates = load_templates()
    attacks = attack_set(texts, templates)
    assert len(attacks) > 600 and {a["position"] for a in attacks} == set(POSITIONS)
    for name, judge in [*verdict.items(), ("cascade", cascade)]:
        clean = judge(texts)
        dirty = judge([a["text"] for a in attacks])
        flips = [a for a, d in zip(attacks, dirty, strict=True) if d and not clean[a["row"]]]
        injected = [(a["template"], a["position"], a["text"][:80]) for a in flips
                    if (a["kind"], a["position"]) not in CONTENT_GLUED]
        assert not injected, (name, injected[:5])
    report = flip_rate(cascade, texts, templates)
    assert report["by_kind"]["instruction"] == report["by_kind"]["role"] == report["by_kind"]["fence"] == 0
    assert report["by_kind"]["topics"] == 0 and all(report["by_position"][p] == 0 for p in ("end", "start", "inside"))
