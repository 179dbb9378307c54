"""What `dtype: auto` runs e5-torch in on a CPU: the faster of float32 and bfloat16 here, measured, not inferred.

A CPU flag says whether bfloat16 products have instructions, not whether they win: on an Intel Xeon with
AVX512_BF16 the ko-piqa prefilter ran at 239 rows per CPU-second in float32 and 143.5 in bfloat16 (issue 42),
while on an AMD EPYC with the same flag bfloat16 ran at 1.6x float32's rate (docs/front_half.md). So where the
flag is present, the first process that resolves `auto` on a machine times both dtypes on e5-small's own
matrix shapes (`measure`: the four products of one encoder block, where a profile found 69% of the embedder's
time; ~0.1-0.3 s in all, one thread), keeps the faster, logs both figures and writes them to a small JSON file
keyed by the CPU model and the torch version, which every later process on that machine reads instead of
measuring again. Where the flag is absent, torch converts every bfloat16 product and float32 is taken without
a measurement.

`PIQAFORGE_EMBED_DTYPE=float32|bfloat16` pins the choice on every device (a benchmark, a comparison, a machine
whose measurement one distrusts); the cache folder is `$PIQAFORGE_DTYPE_CACHE`, else `<repo>/.cache/dtype`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from transforms.core.machine import cpu_model

log = logging.getLogger("piqaforge.embed")

PIN_ENV = "PIQAFORGE_EMBED_DTYPE"
CACHE_ENV = "PIQAFORGE_DTYPE_CACHE"
CHOICES = ("float32", "bfloat16")
# multilingual-e5-small: hidden width and feed-forward width of its 12 blocks (transforms/embed/e5_torch.py)
E5_SMALL = (384, 1536)
_memo: dict[str, str] = {}


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path(__file__).resolve().parents[2] / ".cache" / "dtype")


def machine_key(shapes: tuple[int, int] = E5_SMALL) -> str:
    """What a measurement holds for: this CPU model, this torch, these shapes."""
    import torch

    text = f"{cpu_model()}|torch {torch.__version__}|{shapes[0]}x{shapes[1]}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def measure(shapes: tuple[int, int] = E5_SMALL, tokens: int = 256, repeats: int = 3) -> dict[str, float]:
    """Tokens per second, on one thread, of one encoder block's four linear layers (query-key-value, output,
    feed-forward up and down) in each dtype: the best of `repeats` after a warm-up (oneDNN builds its kernels
    per shape on first use). The dtypes alternate, so a change of load touches both alike."""
    import torch
    import torch.nn.functional as F

    hidden, ffn = shapes
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # rows per CPU-second is what a worker is billed for
    try:
        gen = torch.Generator().manual_seed(0)
        x32 = torch.randn(tokens, hidden, generator=gen)
        w32 = [torch.randn(o, i, generator=gen) / i**0.5 for i, o in
               ((hidden, 3 * hidden), (hidden, hidden), (hidden, ffn), (ffn, hidden))]
        data = {name: (x32.to(getattr(torch, name)), [w.to(getattr(torch, name)) for w in w32]) for name in CHOICES}

        def block(name: str) -> float:
            x, (qkv, out, up, down) = data[name]
            started = time.perf_counter()
            with torch.inference_mode():
                F.linear(F.linear(x, qkv)[:, :hidden], out)
                F.linear(F.gelu(F.linear(x, up)), down)
            return time.perf_counter() - started

        best = {name: float("inf") for name in CHOICES}
        for name in CHOICES:
            block(name)
        for _ in range(repeats):
            for name in CHOICES:
                best[name] = min(best[name], block(name))
        return {name: tokens / max(seconds, 1e-9) for name, seconds in best.items()}
    finally:
        torch.set_num_threads(threads)


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("choice") in CHOICES else None


def _keep_first(path: Path, record: dict[str, Any]) -> dict[str, Any]:
    """Write `record` unless another process wrote its own first: then theirs is the machine's choice, so that
    every worker (and the driver, whose cache keys follow the dtype) agrees."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False, encoding="utf-8") as f:
            json.dump(record, f, indent=2)
        try:
            os.link(f.name, path)  # fails if the file exists: the first measurement on the machine stands
        except FileExistsError:
            record = _read(path) or record
        finally:
            os.unlink(f.name)
    except OSError as err:  # a read-only install: measured again by the next process, never fatal
        log.warning("dtype auto: could not record the measurement in %s (%s)", path, err)
    return record


def choose_cpu_dtype(native: Callable[[], bool], shapes: tuple[int, int] = E5_SMALL,
                     measure_fn: Callable[[tuple[int, int]], dict[str, float]] | None = None) -> str:
    """float32 or bfloat16 for e5-torch on this CPU: measured where `native()` says bfloat16 has instructions."""
    if not native():
        return "float32"
    key = machine_key(shapes)
    if key in _memo:
        return _memo[key]
    path = cache_dir() / f"e5-{key}.json"
    record = _read(path)
    if record is None:
        import torch

        figures = (measure_fn or measure)(shapes)
        record = {"choice": max(CHOICES, key=lambda name: figures[name]), "cpu": cpu_model(),
                  "torch": torch.__version__, "shapes": list(shapes), "unit": "tokens per second, one thread",
                  "figures": {name: round(value, 1) for name, value in figures.items()},
                  "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        record = _keep_first(path, record)
        source = "measured now"
    else:
        source = f"measured {record.get('measured_at', '?')}, {path}"
    figures = record.get("figures", {})
    log.info("dtype auto: %s on %s (float32 %s, bfloat16 %s %s; %s)", record["choice"], record.get("cpu"),
             figures.get("float32"), figures.get("bfloat16"), record.get("unit", ""), source)
    _memo[key] = record["choice"]
    return record["choice"]


def choose_dtype(device: str, native: Callable[[], bool]) -> str:
    """What `dtype: auto` means on `device`: the pin if one is set, float32 on a GPU, else `choose_cpu_dtype`."""
    pinned = os.environ.get(PIN_ENV, "").strip()
    if pinned:
        if pinned not in CHOICES:
            raise ValueError(f"{PIN_ENV}={pinned!r}: pin dtype auto to one of {', '.join(CHOICES)}, or unset it")
        return pinned
    if device != "cpu":
        return "float32"
    return choose_cpu_dtype(native)


def recorded_choices() -> list[dict[str, Any]]:
    """Every measurement recorded on this machine (bench_prefilter_judges.py prints them)."""
    return [r for p in sorted(cache_dir().glob("e5-*.json")) if (r := _read(p)) is not None]


def record_here(shapes: tuple[int, int] = E5_SMALL) -> dict[str, Any] | None:
    """This machine's measurement (None before one was made, or where bfloat16 has no instructions)."""
    return _read(cache_dir() / f"e5-{machine_key(shapes)}.json")
