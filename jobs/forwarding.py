"""Secrets sent with `piqaforge submit` outside Ray's job record (docs/secrets.md).

The job's runtime_env carries only the name of a one-off GCS package and a one-time pad; the package holds
the secrets XOR the pad, and the driver deletes it as soon as it has read it.
"""

from __future__ import annotations

import base64
import json
import os
import secrets as _random
from typing import Any

from transforms.core.secrets import register_secret_values

SECRETS_URI_VAR = "PIQAFORGE_SECRETS_URI"
SECRETS_PAD_VAR = "PIQAFORGE_SECRETS_PAD"
_received_sets: list[str] | None = None



def seal(payload: dict[str, Any]) -> tuple[str, bytes]:
    """A one-time pad (base64) and the payload XOR the pad: neither alone reveals anything."""
    data = json.dumps(payload).encode()
    pad = _random.token_bytes(len(data))
    return base64.b64encode(pad).decode(), bytes(a ^ b for a, b in zip(data, pad, strict=True))


def unseal(pad: str, blob: bytes) -> dict[str, Any]:
    key = base64.b64decode(pad)
    if len(key) != len(blob):
        raise ValueError("the forwarded secrets do not match their pad (a different submission?)")
    result: dict[str, Any] = json.loads(bytes(a ^ b for a, b in zip(blob, key, strict=True)))
    return result


def upload_secrets(client: Any, payload: dict[str, Any]) -> dict[str, str]:
    """Store the sealed secrets as a one-off GCS package; returns the env_vars that point the driver to it.

    The GET pins the name for Ray's URI expiry (10 min): an unreferenced package is deleted by the GCS
    after that even if the driver never starts."""
    pad, blob = seal(payload)
    name = f"_piqaforge_secrets_{_random.token_hex(16)}.zip"
    client._do_request("GET", f"/api/packages/gcs/{name}")
    response = client._do_request("PUT", f"/api/packages/gcs/{name}", data=blob)
    if response.status_code != 200:
        raise RuntimeError(f"could not hand the secrets to the cluster (HTTP {response.status_code})")
    return {SECRETS_URI_VAR: f"gcs://{name}", SECRETS_PAD_VAR: pad}


def receive_forwarded_secrets() -> list[str]:
    """In a driver started by `piqaforge submit`: put the forwarded secrets into this process's environment,
    delete the package, and return the `--set` items that were sent with them (nothing elsewhere)."""
    global _received_sets
    if _received_sets is not None:
        return _received_sets
    uri, pad = os.environ.pop(SECRETS_URI_VAR, None), os.environ.pop(SECRETS_PAD_VAR, None)
    if not uri or not pad:
        return []
    from ray._raylet import GcsClient

    gcs = GcsClient(address=os.environ["RAY_ADDRESS"])
    blob = gcs.internal_kv_get(uri.encode(), namespace=None)
    if blob is None:
        raise RuntimeError(f"the secrets sent with this job are gone ({uri}): Ray drops them 10 min after "
                           "submission if the job has not started; submit again")
    gcs.internal_kv_del(uri.encode(), False, namespace=None)
    payload = unseal(pad, blob)
    for name, value in payload.get("env", {}).items():
        os.environ.setdefault(name, value)
    register_secret_values(payload.get("env", {}).values())
    _received_sets = list(payload.get("set", []))
    return _received_sets
