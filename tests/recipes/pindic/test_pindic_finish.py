"""PIndicQA after generation: translation tags per locale, correction few-shots, release checks, label
balance, the figures. The LLM answers come from `tests/pindic_double.py`, a test double of the
*engine interface* (rules, not a model); the SentencePiece model of the MADLAD tag test is trained
here on real PIQA text (it proves where the tag goes, not translation quality)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

sys.path.insert(0, str(Path(__file__).parents[2]))
from pindic_double import ScriptedEngine  # noqa: E402

from transforms.llm.base import EngineConfig  # noqa: E402
from transforms.recipes.pindic import metrics  # noqa: E402
from transforms.recipes.pindic.finish import (  # noqa: E402
    AttachFixes,
    CopyColumns,
    CorrectTranslation,
    ReleaseChecks,
    ReleaseColumns,
    load_fixes,
)
from transforms.text.textcheck import script_share  # noqa: E402
from transforms.translate.config import LLMTranslateConfig  # noqa: E402
from transforms.translate.llm import LLMTranslator  # noqa: E402
from transforms.translate.stage import TranslateStage  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
LANGS = ["hi", "bn", "ta", "kn", "ml"]


def generated(n: int = 6) -> pa.Table:
    langs = (LANGS * n)[:n]
    return pa.table({
        "id": [f"g{i}" for i in range(n)], "lang": langs, "locale": [f"IN-{x.upper()}" for x in langs],
        "goal": [f"How do you keep rice {i} from going stale in a humid kitchen during the long rainy season"
                 for i in range(n)],
        "sol1": [f"Keep it in a closed steel box with a tight lid on a high shelf option {i}" for i in range(n)],
        "sol2": [f"Keep it in an open cloth bag on the floor next to the stove option {i}" for i in range(n)],
        "label": [i % 2 for i in range(n)], "near_text": ["an existing goal"] * n,
        "_model": ["qwen"] * n, "_prompt": ["pindic/generate@1"] * n, "_gen_params": ["{}"] * n,
    })


def translator(engine: ScriptedEngine) -> LLMTranslator:
    return LLMTranslator(LLMTranslateConfig(engine=EngineConfig(model="scripted-double")), engine=engine)


def test_llm_translation_per_row_target_and_tags_stripped():
    table = generated(5)
    stage = TranslateStage(engine=LLMTranslateConfig(), columns=["goal", "sol1", "sol2"], target_lang_column="lang",
                           outputs={f: f"translated_{f}" for f in ("goal", "sol1", "sol2")})
    stage.use_engine(translator(ScriptedEngine()))
    out = stage(table.append_column("bad_lang", pa.array(["hi", "xx", "hi", "", "ml"])))
    assert out.column("drop_reason").to_pylist() == [None] * 5
    for lang, text in zip(LANGS, out.column("translated_goal").to_pylist(), strict=True):
        assert "<text>" not in text and "</text>" not in text          # the double's fence tags are cleaned off
        assert script_share(text, lang) == 1.0                          # each row in its own target
    assert out.column("translated_lang").to_pylist() == LANGS
    bad = TranslateStage(engine=LLMTranslateConfig(), columns=["goal"], target_lang_column="bad_lang")
    bad.use_engine(translator(ScriptedEngine()))
    reasons = bad(table.append_column("bad_lang", pa.array(["hi", "xx", "hi", "", "ml"]))).column("drop_reason")
    assert reasons.to_pylist() == [None, "target_lang_unsupported", None, "target_lang_missing", None]


def test_madlad_tag_of_each_locale_goes_into_the_source_text(tmp_path):
    spm = pytest.importorskip("sentencepiece")
    from transforms.translate.config import CT2Config
    from transforms.translate.ct2 import CTranslate2Translator, SentencePieceTokenizer
    from transforms.translate.languages import madlad_tag

    lines = [ln for ln in (ROOT / "lake/samples/pindic_piqa_slice.jsonl").read_text().splitlines()]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(lines * 3))
    tags = [madlad_tag(x) for x in LANGS]
    assert tags == ["<2hi>", "<2bn>", "<2ta>", "<2kn>", "<2ml>"]
    spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(tmp_path / "spiece"), vocab_size=300,
                                   user_defined_symbols=tags, character_coverage=1.0)
    engine = CTranslate2Translator(CT2Config(model=str(tmp_path), family="madlad"))
    engine.tokenizer = SentencePieceTokenizer(str(tmp_path / "spiece.model"))
    for lang, tag in zip(LANGS, tags, strict=True):
        sources, prefixes = engine.encode(["Keep the rice dry."], "en", lang)
        pieces = [p for p in sources[0] if p != "\u2581"]             # SentencePiece's word-start marker aside
        assert pieces[0] == tag and prefixes is None                  # one piece, first, no target prefix
        assert tag not in "".join(pieces[1:]) and sources[0][-1] == "</s>"


def test_fixes_files_exist_for_every_locale_and_render():
    for lang in LANGS:
        data = load_fixes(lang)
        assert data["fixes"] and data["error_types"] and data["reviewed_by_native_speaker"] is False
        for fx in data["fixes"]:
            assert script_share(fx["fixed"], lang) > 0.9 and fx["source"].isascii()
    out = AttachFixes()(generated(5))
    assert out.column("fixes_version").to_pylist()[3] == "pindic/fixes/kn@1"
    assert "Corrected:" in out.column("fix_examples")[0].as_py()
    with pytest.raises(Exception, match="no correction few-shots"):
        AttachFixes()(pa.table({"lang": ["te"]}))


def test_the_finish_chain_on_a_tiny_slice():
    """generated items → copy provenance → translate → few-shots → correct → checks → columns → balance."""
    engine = ScriptedEngine()
    table = generated(6)
    table = CopyColumns(mapping={"_model": "gen_model", "_prompt": "gen_prompt"})(table)
    tr = TranslateStage(engine=LLMTranslateConfig(), columns=["goal", "sol1", "sol2"], target_lang_column="lang",
                        outputs={f: f"translated_{f}" for f in ("goal", "sol1", "sol2")})
    table = tr.use_engine(translator(engine))(table)
    table = AttachFixes()(table)
    table = CorrectTranslation().use_engine(engine)(table)
    assert table.column("drop_reason").to_pylist() == [None] * 6
    assert table.column("_prompt")[0].as_py() == "pindic/correct@2"
    assert table.column("gen_prompt")[0].as_py() == "pindic/generate@1"  # generation provenance kept
    checked = ReleaseChecks(min_goal_plus_solution_words=25)(table)
    assert checked.column("drop_reason").to_pylist() == [None] * 6   # 16 + 14 words, all in script
    short = ReleaseChecks(min_goal_plus_solution_words=40)(table)
    assert set(short.column("drop_reason").to_pylist()) == {"too_short"}
    english = table.set_column(table.schema.get_field_index("corrected_goal"), "corrected_goal",
                               table.column("goal"))
    assert set(ReleaseChecks()(english).column("drop_reason").to_pylist()) == {"wrong_script"}
    cols = ReleaseColumns()(checked)
    assert cols.column("en_goal").to_pylist() == table.column("goal").to_pylist()
    assert cols.column("goal").to_pylist() == table.column("corrected_goal").to_pylist()
    assert cols.column("prompt_id")[0].as_py() == "pindic/generate" and cols.column("prompt_version")[0].as_py() == "1"
    figures = metrics.correction_figures(table.to_pylist())
    assert set(figures) == set(LANGS) and figures["hi"]["edit_rate"] == 1.0   # the double edits every goal
    assert 0 < figures["hi"]["chrf_mt_vs_corrected"] < 100


def test_diversity_figures():
    assert metrics.distinct_n(["a b c", "a b d"], 1) == 0.6667
    assert metrics.distinct_n(["a b c", "a b d"], 2) == 0.75
    v = np.eye(3, dtype=np.float32)
    assert metrics.mean_pairwise_cosine(v) == 0.0
    assert metrics.mean_pairwise_cosine(np.ones((3, 2), np.float32) / np.sqrt(2)) == 1.0
    assert metrics.mean_pairwise_cosine(v[:1]) is None
