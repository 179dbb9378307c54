"""The CTranslate2 backend end to end on a tiny model this test builds and converts itself.

No MT weights can be downloaded here and none ship on PyPI, so: a SentencePiece vocabulary is trained
on a few hundred real sentences of the parallel corpora (English, Hindi, Japanese) with MADLAD's
`<2xx>` tags and NLLB's language codes as user-defined pieces; a randomly initialised 1-layer T5
(MADLAD's architecture) is saved with transformers and converted with
`ctranslate2.converters.TransformersConverter`. Its translations are noise; what is proved is the
path around the model: the tokens handed to `translate_batch` (the tag inside the source text),
batching in length order with the output order preserved, the length guard, the cache (a second
call makes no translator call), failures and empty outputs becoming drop reasons in the stage.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from transforms.core import columns as C
from transforms.translate.base import build_translator
from transforms.translate.config import CT2Config
from transforms.translate.languages import nllb_code
from transforms.translate.quality import data_root
from transforms.translate.stage import TranslateStage

# the languages of the bundled parallel corpora and the recipes
CODES = ["en", "hi", "bn", "ta", "kn", "ml", "te", "mr", "gu", "ur", "ja", "ko", "zh", "ru", "fr", "de", "es"]
ctranslate2 = pytest.importorskip("ctranslate2")
spm = pytest.importorskip("sentencepiece")
pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

DATA = data_root()
SENTENCES = ["Boil the water before you add the rice.", "Use a dry cloth to wipe the table.",
             "Keep the knife away from children.", "Put the milk in the fridge.",
             "Open the window.", "Fold the towel in half and hang it on the rail to dry overnight.",
             "Salt.", "Wash your hands with soap."]


def _corpus_lines() -> list[str]:
    files = [DATA / "parallel_indic_joshua" / "dev.hi-en.en.0", DATA / "parallel_indic_joshua" / "dev.hi-en.hi",
             DATA / "parallel_en_ja_small" / "dev.ja"]
    if not all(f.exists() for f in files):
        pytest.skip(f"parallel corpora not found under {DATA}")
    lines: list[str] = []
    for f in files:
        lines += [ln.strip() for ln in f.read_text(encoding="utf-8").splitlines()[:300] if ln.strip()]
    return lines


def _build(folder: Path, name: str, lm_head: str) -> Path:
    """Train the vocabulary, build a random T5, convert it; `lm_head` shapes the output layer:
    "words" never prefers pad/eos/unk (outputs run to max length), "silent" says nothing."""
    import transformers
    from ctranslate2.converters import TransformersConverter

    sp_prefix = folder / "sp"
    if not (folder / "sp.model").exists():
        (folder / "corpus.txt").write_text("\n".join(_corpus_lines()), encoding="utf-8")
        tags = [f"<2{code}>" for code in CODES] + [nllb_code(code) for code in CODES]
        spm.SentencePieceTrainer.train(input=str(folder / "corpus.txt"), model_prefix=str(sp_prefix),
                                       vocab_size=1500, model_type="unigram", pad_id=0, eos_id=1, unk_id=2,
                                       bos_id=-1, user_defined_symbols=tags, character_coverage=0.9995,
                                       num_threads=1, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=str(folder / "sp.model"))
    vocab = [(sp.id_to_piece(i), sp.get_score(i)) for i in range(sp.get_piece_size())]
    tokenizer = transformers.T5Tokenizer(vocab=vocab, extra_ids=0)
    config = transformers.T5Config(vocab_size=len(vocab), d_model=32, d_kv=16, d_ff=64, num_layers=1,
                                   num_decoder_layers=1, num_heads=2, decoder_start_token_id=0, pad_token_id=0,
                                   eos_token_id=1, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = transformers.T5ForConditionalGeneration(config)
    with torch.no_grad():
        if lm_head == "words":
            model.lm_head.weight[:3] = 0.0
        else:  # every logit 0: greedy picks id 0 (padding) each step, which decodes to nothing
            model.lm_head.weight.zero_()
    hf_dir = folder / f"{name}-hf"
    model.save_pretrained(hf_dir)
    tokenizer.save_pretrained(hf_dir)
    (hf_dir / "spiece.model").write_bytes((folder / "sp.model").read_bytes())
    out = folder / f"{name}-ct2"
    TransformersConverter(str(hf_dir), copy_files=["spiece.model"]).convert(str(out), force=True)
    return out


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("tiny_mt")
    return {"words": _build(folder, "words", "words"), "silent": _build(folder, "silent", "silent")}


class TranslatorSpy:
    """Wraps the real ctranslate2.Translator: records what it is handed, then lets it translate."""

    def __init__(self, translator):
        self.translator = translator
        self.calls: list[dict] = []

    def translate_batch(self, source, **kwargs):
        self.calls.append({"source": [list(s) for s in source], **kwargs})
        return self.translator.translate_batch(source, **kwargs)


def _engine(model: Path, **kw):
    cfg = {"backend": "ctranslate2", "model": str(model), "beam_size": 1, "max_decoding_length": 6,
           "compute_type": "float32", "batch_size": 3, **kw}
    engine = build_translator(cfg)
    engine.setup()
    spy = TranslatorSpy(engine.translator)
    engine.translator = spy
    return engine, spy


def test_madlad_tag_goes_into_the_source_text_before_tokenisation(models):
    engine, spy = _engine(models["words"])
    sp = spm.SentencePieceProcessor(model_file=str(models["words"] / "spiece.model"))
    out = engine.translate(SENTENCES[:2], "en", "hi")
    fed = [toks for call in spy.calls for toks in call["source"]]
    assert sorted(map(tuple, fed)) == sorted(tuple(sp.encode(f"<2hi> {s}", out_type=str) + ["</s>"])
                                             for s in SENTENCES[:2])
    vocab = json.loads((models["words"] / "shared_vocabulary.json").read_text(encoding="utf-8"))
    for toks in fed:
        ids = engine.tokenizer.ids(toks)
        # the text starts with the tag: SentencePiece's word-boundary piece, then the tag as ONE piece
        assert toks[:2] == ["▁", "<2hi>"] and ids[1] == sp.piece_to_id("<2hi>") != sp.unk_id()
        assert toks[-1] == "</s>" and "<2hi>" not in toks[2:]
        # the converted model's vocabulary agrees with the tokenizer on every id
        assert [vocab.index(t) for t in toks] == ids
    assert all(call["target_prefix"] is None for call in spy.calls)
    assert all(isinstance(t, str) and t for t in out)
    engine.translate(SENTENCES[:1], "en", "ja")
    assert spy.calls[-1]["source"][0][:2] == ["▁", "<2ja>"]


def test_nllb_family_source_code_first_and_target_prefix(models):
    engine, spy = _engine(models["words"], family="nllb", model_id="tiny-as-nllb")
    sp = spm.SentencePieceProcessor(model_file=str(models["words"] / "spiece.model"))
    out = engine.translate(SENTENCES[:3], "en", "ta")
    for call in spy.calls:
        assert call["target_prefix"] == [["tam_Taml"]] * len(call["source"])
        for toks in call["source"]:
            assert toks[0] == nllb_code("en") == "eng_Latn" and toks[-1] == "</s>"
            assert sp.piece_to_id(toks[0]) != sp.unk_id()
            assert "<2ta>" not in toks
    # the forced target code comes back as the first output token; exactly that one is cut off
    first = spy.calls[0]["source"][0]
    raw = spy.translator.translate_batch([first], target_prefix=[["tam_Taml"]], beam_size=1, max_decoding_length=6)
    hyp = raw[0].hypotheses[0]
    assert hyp[0] == "tam_Taml" and len(hyp) > 1
    sent = SENTENCES[:3][[tuple(engine.tokenizer.encode(s, "eng_Latn")) for s in SENTENCES[:3]].index(tuple(first))]
    assert out[SENTENCES.index(sent)] == engine.tokenizer.decode(hyp[1:]).strip()


def test_a_language_the_model_lacks_is_named_in_one_line(models):
    """Thai and Swahili are valid ISO codes (langcodes) but not in this model's vocabulary: the backend
    says which tokens it lacks, before any batch is translated, for both families."""
    from transforms.translate.languages import LanguageError

    engine, spy = _engine(models["words"])
    with pytest.raises(LanguageError) as err:
        engine.translate(SENTENCES[:2], "en", "th")
    assert str(err.value).splitlines() == [str(err.value)]
    assert "th (<2th>)" in str(err.value) and spy.calls == []
    nllb, spy = _engine(models["words"], family="nllb", model_id="tiny-as-nllb")
    assert nllb.missing_codes("en", "sw") == {"sw": "swh_Latn"}
    with pytest.raises(LanguageError, match=r"lacks language code\(s\) sw \(swh_Latn\)"):
        nllb.translate(SENTENCES[:2], "en", "sw")
    assert spy.calls == [] and nllb.missing_codes("en", "ta") == {}


def test_batches_in_length_order_and_output_order_preserved(models):
    batched, spy = _engine(models["words"], batch_size=3)
    got = batched.translate(SENTENCES, "en", "hi")
    assert len(spy.calls) == 3  # 8 distinct sentences, 3 per call
    lengths = [len(t) for call in spy.calls for t in call["source"]]
    assert lengths == sorted(lengths)  # sorted by length across batches: little padding
    one_by_one, _ = _engine(models["words"], batch_size=1)
    alone = [one_by_one.translate([s], "en", "hi")[0] for s in SENTENCES]
    assert got == alone
    assert len(set(got)) > 1  # the noise differs between inputs: a wrong order could not pass


def test_cache_second_call_makes_no_translator_call(models, tmp_path):
    engine, spy = _engine(models["words"], cache_dir=str(tmp_path / "cache"))
    first = engine.translate(SENTENCES, "en", "hi")
    n_calls = len(spy.calls)
    assert n_calls > 0 and engine.stats.translated == len(SENTENCES)
    assert engine.translate(SENTENCES, "en", "hi") == first
    assert len(spy.calls) == n_calls and engine.stats.cache_hits == len(SENTENCES)
    # a new engine (a resumed run, another worker) reads the cache folder: still no translator call
    fresh, fresh_spy = _engine(models["words"], cache_dir=str(tmp_path / "cache"))
    assert fresh.translate(list(reversed(SENTENCES)), "en", "hi") == list(reversed(first))
    assert fresh_spy.calls == []
    # another target language or another model is another key
    fresh.translate(SENTENCES[:1], "en", "ja")
    assert len(fresh_spy.calls) == 1
    other, other_spy = _engine(models["words"], cache_dir=str(tmp_path / "cache"), model_id="another")
    other.translate(SENTENCES[:1], "en", "hi")
    assert len(other_spy.calls) == 1


def test_segments_translated_cached_and_reassembled(models):
    engine, spy = _engine(models["words"])
    text = f"{SENTENCES[0]} {SENTENCES[1]}\n{SENTENCES[2]}"
    [whole] = engine.translate([text], "en", "ja")
    fed = [toks for call in spy.calls for toks in call["source"]]
    assert len(fed) == 3 and all(t[:2] == ["▁", "<2ja>"] for t in fed)  # every sentence carries the tag
    parts = [engine.translate([s], "en", "ja")[0] for s in SENTENCES[:3]]
    assert len(spy.calls) == 1  # the sentences alone come from the cache
    assert whole == f"{parts[0]}{parts[1]}\n{parts[2]}"  # Japanese: no space between sentences
    [hindi] = engine.translate([text], "en", "hi")
    assert hindi.count("\n") == 1 and hindi.split("\n")[0].count(" ") >= 1


def test_length_guard_cuts_long_sources(models):
    engine, spy = _engine(models["words"], max_input_tokens=12)
    engine.translate([SENTENCES[5], SENTENCES[6]], "en", "hi")
    fed = spy.calls[0]["source"]
    assert max(len(t) for t in fed) == 12 and all(t[-1] == "</s>" for t in fed)
    assert engine.stats.truncated == 1 and spy.calls[0]["max_input_length"] == 12


def test_stage_translates_columns_and_drops_with_reasons(models):
    stage = TranslateStage(engine=CT2Config(model=str(models["words"]), beam_size=1, max_decoding_length=6,
                                            compute_type="float32"),
                           columns=["goal", "sol1"], target_lang_column="lang")
    batch = pa.table({C.ID: ["a", "b", "c", "d", "e"],
                      "goal": [SENTENCES[0], SENTENCES[1], SENTENCES[2], "  ", SENTENCES[4]],
                      "sol1": [SENTENCES[3], SENTENCES[3], SENTENCES[5], SENTENCES[6], SENTENCES[7]],
                      "lang": ["hi", "ja", "xx", "hi", None]})
    out = stage(batch)
    assert out.num_rows == 5 and out.column(C.ID).to_pylist() == ["a", "b", "c", "d", "e"]
    assert out.column(C.DROP_REASON).to_pylist() == [None, None, "target_lang_unsupported", "source_empty",
                                                     "target_lang_missing"]
    assert out.column("translation_issue").to_pylist()[3] == "goal: source_empty"
    assert out.column("translated_lang").to_pylist()[:2] == ["hi", "ja"]
    goal_mt = out.column("goal_mt").to_pylist()
    assert goal_mt[0] and goal_mt[1] and goal_mt[2] is None
    assert out.column(C.MODEL).to_pylist()[0] == "ctranslate2:words-ct2"
    assert json.loads(out.column(C.GEN_PARAMS)[0].as_py())["beam_size"] == 1
    # the stage's engine saw the shared sentence (sol1 of a and b) once per target language
    assert stage.translator.stats.translated == 4


def test_stage_fixed_target_names_outputs_and_empty_outputs_are_dropped(models):
    stage = TranslateStage(engine=CT2Config(model=str(models["silent"]), beam_size=1), columns=["goal"],
                           target_lang="ta", outputs={"goal": "goal_translated"})
    out = stage(pa.table({C.ID: ["a", "b"], "goal": SENTENCES[:2]}))
    assert out.column("goal_translated").to_pylist() == [None, None]
    assert out.column(C.DROP_REASON).to_pylist() == ["translation_empty"] * 2
    assert stage.translator.stats.empty_segments == 2 and len(stage.translator.cache) == 0  # empties not cached
    empty = stage(pa.table({C.ID: pa.array([], pa.string()), "goal": pa.array([], pa.string())}))
    assert "goal_translated" in empty.schema.names and C.MODEL in empty.schema.names


def test_backend_failure_drops_or_raises(models):
    engine, spy = _engine(models["words"])
    spy.translator.unload_model()  # the real translator now refuses to translate
    assert engine.translate_with_status(SENTENCES[:2], "en", "hi") == [(None, "translation_failed")] * 2
    assert engine.stats.failed_segments == 2
    strict, strict_spy = _engine(models["words"], on_error="raise")
    strict_spy.translator.unload_model()
    with pytest.raises(RuntimeError):
        strict.translate(SENTENCES[:1], "en", "hi")


def test_bad_configs_fail_clearly(models, tmp_path):
    with pytest.raises(FileNotFoundError, match="ct2-transformers-converter"):
        build_translator({"backend": "ctranslate2", "model": str(tmp_path)}).setup()
    with pytest.raises(ValueError, match="exactly one"):
        TranslateStage(engine=CT2Config(model="m"), columns=["goal"])
    with pytest.raises(ValueError, match="unknown language"):
        TranslateStage(engine=CT2Config(model="m"), columns=["goal"], target_lang="klingonish")  # tlh is real
    engine, _ = _engine(models["words"])
    with pytest.raises(ValueError, match="unknown language"):
        engine.translate(["x"], "en", "zz")


def test_stage_reports_chrf_on_the_parallel_corpus(models):
    stage = TranslateStage(engine=CT2Config(model=str(models["words"]), beam_size=1, max_decoding_length=6,
                                            compute_type="float32"), columns=["goal"], target_lang="hi")
    figures = stage.quality(limit=6, seed=3)
    hi = figures["pairs"]["en-hi"]
    assert hi["n"] == 6 and hi["corpus"] == "parallel_indic_joshua" and hi["model"] == "ctranslate2:words-ct2"
    assert 0.0 <= hi["chrf"] < 20.0  # a random model: near zero, but computed on its real output
    assert stage.translator.stats.translated >= 6
    assert stage.quality(limit=6, seed=3)["pairs"]["en-hi"]["chrf"] == hi["chrf"]  # from the cache
    assert TranslateStage(engine=stage.engine, columns=["goal"], target_lang="kn").use_engine(
        stage.translator).quality(limit=2)["no_corpus"] == ["en-kn"]
