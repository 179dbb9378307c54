"""The sentence-transformers embedder on a GPU against the CPU (`-m gpu`; scripts/gpu_check.sh).

A small BERT with random weights and a vocabulary made from the bundled rows is built and saved as a
SentenceTransformer folder here (nothing to download or carry); the `sentence-transformers` backend
of transforms/embed must return the same unit vectors on the device as on the CPU."""

from __future__ import annotations

import json

import numpy as np
import pytest
from gpuutil import gpu_device

from transforms.embed.base import EmbedderConfig, build_embedder
from transforms.llm.prepare import ROOT

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
st = pytest.importorskip("sentence_transformers")
pytestmark = pytest.mark.gpu


def texts() -> list[str]:
    with (ROOT / "lake" / "samples" / "ko_crawl_sample.jsonl").open(encoding="utf-8") as fh:
        return [json.loads(line)["text"] for _, line in zip(range(200), fh, strict=False)]


def tiny_sentence_model(folder) -> str:
    try:
        from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    except ImportError:  # sentence-transformers < 6
        from sentence_transformers.models import Pooling, Transformer
    bert_dir = folder / "bert"
    bert_dir.mkdir()
    chars = sorted({c for t in texts() for c in t if not c.isspace()})
    (bert_dir / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *chars]) + "\n",
                                        encoding="utf-8")
    tok = transformers.BertTokenizerFast(vocab_file=str(bert_dir / "vocab.txt"), do_lower_case=False,
                                         tokenize_chinese_chars=True)
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=len(chars) + 5, hidden_size=64, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=128, max_position_embeddings=512)
    transformers.BertModel(config).save_pretrained(bert_dir)
    tok.save_pretrained(bert_dir)
    word = Transformer(str(bert_dir), max_seq_length=128)
    model = st.SentenceTransformer(modules=[word, Pooling(64, "mean")], device="cpu")
    out = folder / "st"
    model.save(str(out))
    return str(out)


def test_sentence_transformers_embedder_on_device_equals_cpu(tmp_path):
    device = gpu_device()
    path = tiny_sentence_model(tmp_path)
    rows = texts()
    cpu = build_embedder(EmbedderConfig(backend="sentence-transformers", model=path, device="cpu",
                                        batch_size=64)).encode(rows)
    dev = build_embedder(EmbedderConfig(backend="sentence-transformers", model=path, device=device,
                                        batch_size=64)).encode(rows)
    assert cpu.shape == dev.shape == (len(rows), 64)
    np.testing.assert_allclose(np.linalg.norm(dev, axis=1), 1.0, atol=1e-5)
    cos = np.einsum("ij,ij->i", cpu, dev)
    assert cos.min() > 0.9999, cos.min()
