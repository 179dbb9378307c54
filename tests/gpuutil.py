"""The device of the tests marked `gpu`: cuda, or the CPU when scripts/gpu_check.sh --cpu proves the
checks on a machine without a GPU (PIQAFORGE_TEST_DEVICE=cpu)."""

from __future__ import annotations

import os

import pytest

DEVICE_ENV = "PIQAFORGE_TEST_DEVICE"


def gpu_device() -> str:
    device = os.environ.get(DEVICE_ENV, "cuda")
    if device.startswith("cuda"):
        torch = pytest.importorskip("torch")
        if not torch.cuda.is_available():
            pytest.skip(f"no CUDA device (set {DEVICE_ENV}=cpu to run this check on the CPU)")
    return device
