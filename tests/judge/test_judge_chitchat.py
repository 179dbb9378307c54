"""The chit-chat gate of the Ko-PIQA cascade (`e5-chitchat`) and the training-row selection it uses.

Real labels (lake/samples/ko_seed_labels.jsonl + ko_seed_chitchat.jsonl, the mined hard negatives), real
multilingual-e5-small through the bundled seed embeddings; only a few crawl-sample utterances are embedded.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import ROOT, SAMPLES
from jobutil import ko_piqa_judges

from transforms.judge.linear import LinearJudge, training_rows
from transforms.judge.member import LinearClassifier
from transforms.judge.views import normalise
from transforms.recipes.ko_piqa.seeds import LabelError, load_labels

CHIT = ("3i4k", "chatbot_songys")


def _members() -> dict[str, dict]:
    cfg = ko_piqa_judges()  # the recipe's own judges (jobs/recipes/ko-piqa.yaml)
    return {m["name"]: m for m in cfg["ensemble"]["classifiers"] if m.get("kind") == "linear"}


def _judge(name: str) -> LinearJudge:
    judge = _members()[name]["judge"]
    return LinearJudge.model_validate(judge | {"labels": str(ROOT / judge["labels"]),
                                               "extra_labels": [str(ROOT / f) for f in judge.get("extra_labels", [])]})


def test_mined_negatives_are_new_chit_chat_rows() -> None:
    """The hard negatives are 3i4k/chatbot utterances labelled 0, none in the crawl sample or the seeds."""
    mined = load_labels(SAMPLES / "ko_seed_chitchat.jsonl")
    assert len(mined) == 220 and {r.source for r in mined} == set(CHIT)
    assert not any(r.physical for r in mined) and all(r.note and r.annotator for r in mined)
    assert len({r.id for r in mined}) == len(mined)
    sample = {normalise(json.loads(x)["text"]) for x in SAMPLES.joinpath("ko_crawl_sample.jsonl").open(encoding="utf-8")}
    seeds = {normalise(r.text) for r in load_labels(SAMPLES / "ko_seed_labels.jsonl")}
    assert not {normalise(r.text) for r in mined} & (sample | seeds)


def test_training_rows_follow_negative_sources() -> None:
    gate, strict = _judge("e5-chitchat"), _judge("e5-strict")
    rows = training_rows(gate)
    assert {r.source for r in rows if not r.physical} == set(CHIT)
    assert sum(r.physical for r in rows) == 36 and len(rows) == 36 + 880 + 220
    kin = training_rows(strict)
    assert {r.source for r in kin} == {"naver_kin"} and len(kin) == 550
    # every row when unrestricted; an extra file with held-out rows is refused like the labels file
    assert len(training_rows(gate.model_copy(update={"negative_sources": None}))) == 1430 + 220
    with pytest.raises(LabelError, match="held-out"):
        training_rows(gate.model_copy(update={"extra_labels": [str(SAMPLES / "ko_heldout_labels.jsonl")]}))


def test_gate_stops_smart_home_commands_and_keeps_seed_positives(tmp_path) -> None:
    """The gate keeps >= 95% of the seed positives out of fold, and rejects the crawl sample's device
    commands (never trained on) that the physical judges mistake for device questions."""
    cfg = _members()["e5-chitchat"]
    gate = LinearClassifier.model_validate(cfg | {"judge": _judge("e5-chitchat").model_dump(),
                                                  "embed_cache_dir": str(tmp_path)})
    fitted = gate.fitted()
    assert fitted.cv["recall"] >= 0.95
    assert fitted.cv["pass_rate_by_source"]["3i4k"] == fitted.cv["pass_rate_by_source"]["chatbot_songys"] == 0
    sample = [json.loads(x) for x in SAMPLES.joinpath("ko_crawl_sample.jsonl").open(encoding="utf-8")]
    devices = [r["text"] for r in sample if r["source"] == "3i4k"
               and any(w in r["text"] for w in ("보일러", "에어컨", "세탁기", "환풍기", "가스"))][:24]
    kin_pos = [r.text for r in load_labels(SAMPLES / "ko_seed_labels.jsonl") if r.physical][:12]
    scores = np.asarray(gate.scores(devices + kin_pos))
    assert len(devices) >= 12
    assert (scores[:len(devices)] < gate.cut_off()).all(), [d for d, s in zip(devices, scores[:len(devices)], strict=True) if s >= gate.cut_off()]
    assert (scores[len(devices):] >= gate.cut_off()).mean() >= 0.9  # in-sample positives: a sanity floor
