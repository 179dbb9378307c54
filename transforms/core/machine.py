"""The machine a run's rates were measured on, as its manifest records it (issue 42: `piqaforge plan` says
which CPU model or GPU each rate came from, so a rate from a 2-core laptop is not read as a cluster node's).

Read from /proc without importing torch or asking Ray: the CPU model, its logical CPUs, whether it has
bfloat16 instructions, and the NVIDIA GPUs the driver lists (/proc/driver/nvidia/gpus/*/information).
"""

from __future__ import annotations

import functools
import os
import platform
from pathlib import Path
from typing import Any


def cpu_model() -> str:
    """The CPU's model name as the kernel reports it (platform.processor() elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


@functools.lru_cache(maxsize=1)
def bfloat16_instructions() -> tuple[str, ...]:
    """The CPU's bfloat16 dot-product instructions (AVX512_BF16, AMX-BF16) from its flags: empty where it has none
    (torch then computes bfloat16 by conversion, slower than float32). The one reader of these flags: the
    manifest records them and the embedder's `dtype: auto` asks here (transforms/embed/base.py)."""
    return tuple(sorted(_cpu_flags() & {"avx512_bf16", "amx_bf16"}))


def nvidia_gpus() -> list[str]:
    """The model of each NVIDIA GPU the kernel driver lists ([] without one, or without the driver)."""
    names = []
    for info in sorted(Path("/proc/driver/nvidia/gpus").glob("*/information")):
        try:
            for line in info.read_text(encoding="utf-8", errors="replace").splitlines():
                if line.startswith("Model:"):
                    names.append(line.split(":", 1)[1].strip())
        except OSError:
            continue
    return names


@functools.lru_cache(maxsize=1)
def machine_info() -> dict[str, Any]:
    """What a manifest records of the machine its driver runs on."""
    return {"cpu_model": cpu_model(), "logical_cpus": os.cpu_count(),
            "bfloat16_instructions": list(bfloat16_instructions()),
            "gpus": nvidia_gpus(), "system": f"{platform.system()} {platform.machine()}"}
