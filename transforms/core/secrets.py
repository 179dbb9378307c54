"""Secrets: named, forwarded, never recorded (docs/secrets.md).

A job names the environment variables its workers need (`secrets: [OPENAI_API_KEY]`, at job level or
in a stage's `resources.secrets`); the values travel from the process that starts the job to the
workers inside the pickled stage (stage.Resources), never through a config field or a Ray
runtime_env. Whatever a config holds anyway is recorded redacted:

* every value of an `env_vars` mapping, and the value of every key that looks like a credential
  (`credential_name`: a word KEY, TOKEN, SECRET, PASSWORD ... in its name) becomes `<redacted>`;
* in every string, the userinfo of a URL (`https://user:pw@host`) and the known secret values of
  this process (the forwarded ones and the literals found in the config) become `<redacted>`.

Fingerprints that decide resume see the same redacted view, except that a non-credential
`env_vars` value enters as an HMAC keyed by the lake's own key (`<lake>/.piqaforge/fingerprint.key`,
mode 0600): changing such a variable re-runs the stage, rotating an API key does not, and the
recorded fingerprint cannot be brute-forced for the value without the key.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
import secrets as _random
from collections.abc import Iterable
from pathlib import Path
from typing import Any

REDACTED = "<redacted>"
ENV_VARS = "env_vars"
SECRETS_FIELD = "secrets"  # a list of variable *names*: recorded as is, left out of fingerprints
KEY_FILE = Path(".piqaforge") / "fingerprint.key"
# Shorter values are not scrubbed from free text (they would blank ordinary words and numbers);
# they are still redacted wherever they sit under a credential-like key or in env_vars.
MIN_SCRUB_CHARS = 6

_CREDENTIAL_WORDS = {"apikey", "token", "secret", "password", "passwd", "pwd", "credential",
                     "credentials", "passphrase"}
# "key" alone is a credential only as the field's last word (OPENAI_KEY, api_key, key) and not after a
# word that makes it a data key (sort_key, cache_key); Key_Properties_Materials is a taxonomy category.
_DATA_KEY_WORDS = {"sort", "sorts", "cache", "partition", "group", "join", "dedup", "primary", "foreign", "row",
                   "hash", "lookup", "dict", "map", "id", "unique", "composite", "shard", "index", "match",
                   "label", "item", "column", "field", "json", "order", "bucket", "record", "sample"}
_CREDENTIAL_SUFFIXES = ("apikey", "accesskey", "secretkey", "privatekey", "token", "secret", "password")
# A last word that says the field *names* or *locates* a secret rather than holding it.
_POINTER_WORDS = {"env", "var", "name", "names", "file", "path", "dir", "column", "col", "field", "header"}
# A first word that makes the field a switch about a secret, not the secret (require_api_key: true).
_FLAG_WORDS = {"require", "requires", "use", "has", "needs", "enable", "send"}
_URL_USERINFO = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.\-]*://)(?P<userinfo>[^\s/?#@]+)@")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

_known: set[str] = set()
_fingerprint_key: bytes | None = None
log = logging.getLogger("piqaforge")


# -- what looks like a credential ------------------------------------------------------------------
def _words(name: str) -> list[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    return [w for w in re.split(r"[^A-Za-z0-9]+", spaced.lower()) if w]


def credential_name(name: str) -> bool:
    """True for OPENAI_API_KEY, HF_TOKEN, db_password, clientSecret; False for max_tokens, tokenizer,
    api_key_env (it names the variable), require_api_key (a switch), secrets (a list of names)."""
    words = _words(str(name))
    if not words or name == SECRETS_FIELD or words[-1] in _POINTER_WORDS or words[0] in _FLAG_WORDS:
        return False
    if words[-1] in ("key", "keys") and (len(words) == 1 or words[-2] not in _DATA_KEY_WORDS):
        return True
    return any(w in _CREDENTIAL_WORDS or w.endswith(_CREDENTIAL_SUFFIXES) for w in words)


def valid_variable_name(name: str) -> bool:
    return bool(_NAME.match(name))


# -- known values and free text --------------------------------------------------------------------
def register_secret_values(values: Iterable[str]) -> None:
    """Remember values to scrub from every string we record or log in this process."""
    _known.update(v for v in values if isinstance(v, str) and len(v) >= MIN_SCRUB_CHARS)


def register_environment(names: Iterable[str]) -> None:
    register_secret_values(os.environ[n] for n in names if os.environ.get(n))


def scrub_text(text: str) -> str:
    """URL userinfo and every known secret value replaced by `<redacted>`."""
    if not text:
        return text
    out = _URL_USERINFO.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)
    for value in sorted(_known, key=len, reverse=True):
        if value in out:
            out = out.replace(value, REDACTED)
    return out


# -- records ---------------------------------------------------------------------------------------
def redact(obj: Any) -> Any:
    """A copy of a config (dicts, lists, scalars) that is safe to record."""
    return _walk(obj, hashed_env=None)


def fingerprint_view(obj: Any) -> Any:
    """What a fingerprint may see: `redact` with non-credential env_vars values keyed-hashed, and
    `secrets` name lists left out (naming one more secret does not change what a stage computes)."""
    return _walk(obj, hashed_env=_fingerprint_key, for_fingerprint=True)


def _walk(obj: Any, hashed_env: bytes | None, for_fingerprint: bool = False, secret: bool = False) -> Any:
    if isinstance(obj, dict):
        out: dict[Any, Any] = {}
        for key, value in obj.items():
            name = str(key)
            if for_fingerprint and name == SECRETS_FIELD and _names_only(value):
                continue
            if name == ENV_VARS and isinstance(value, dict):
                out[key] = {k: _env_value(str(k), v, hashed_env, for_fingerprint) for k, v in value.items()}
            else:
                out[key] = _walk(value, hashed_env, for_fingerprint, secret or credential_name(name))
        return out
    if isinstance(obj, list | tuple):
        return [_walk(v, hashed_env, for_fingerprint, secret) for v in obj]
    if secret and isinstance(obj, str | int | float) and not isinstance(obj, bool) and obj != "":
        return REDACTED
    if isinstance(obj, str):
        return scrub_text(obj)
    return obj


def _env_value(name: str, value: Any, key: bytes | None, for_fingerprint: bool) -> Any:
    if value is None:
        return None
    if for_fingerprint and key is not None and not credential_name(name):
        return "hmac-sha256:" + hmac.new(key, str(value).encode(), hashlib.sha256).hexdigest()[:32]
    return REDACTED


def _names_only(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) and valid_variable_name(v) for v in value)


def literal_secrets(data: Any, path: str = "") -> list[tuple[str, str]]:
    """(dotted field, why) for every literal secret in a raw config mapping; registers the values."""
    found: list[tuple[str, str]] = []
    if isinstance(data, dict):
        for key, value in data.items():
            where = f"{path}.{key}" if path else str(key)
            if str(key) == ENV_VARS and isinstance(value, dict):
                for name, v in value.items():
                    if credential_name(str(name)) and v not in (None, ""):
                        found.append((f"{where}.{name}", "an env_vars value under a credential-like name"))
                        register_secret_values([str(v)])
            elif credential_name(str(key)) and isinstance(value, str | int | float) \
                    and not isinstance(value, bool) and value != "":
                found.append((where, "a credential-like key with a literal value"))
                register_secret_values([str(value)])
            else:
                found += literal_secrets(value, where)
    elif isinstance(data, list):
        for i, value in enumerate(data):
            found += literal_secrets(value, f"{path}[{i}]")
    elif isinstance(data, str) and (m := _URL_USERINFO.search(data)):
        found.append((path, "a URL with a user name or password in it"))
        register_secret_values(m["userinfo"].split(":", 1)[-1:])
    return found


# -- the lake's fingerprint key --------------------------------------------------------------------
def bind_fingerprint_key(lake_root: str | os.PathLike[str]) -> bytes:
    """Load (or create, mode 0600) `<lake>/.piqaforge/fingerprint.key` and use it for fingerprints."""
    global _fingerprint_key
    path = Path(lake_root) / KEY_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w") as f:
            f.write(_random.token_hex(32))
    text = path.read_text().strip()
    if len(text) < 32:
        raise ValueError(f"{path} is not a piqaforge fingerprint key (delete it to make a new one; "
                         "fingerprints of finished stages with env_vars will then change)")
    _fingerprint_key = bytes.fromhex(text)
    return _fingerprint_key


# -- console and logs ------------------------------------------------------------------------------
class ScrubSecrets(logging.Filter):
    """A handler filter: the formatted message with URL userinfo and known secrets redacted."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = scrub_text(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and record.exc_info[1] is not None:
            text = scrub_text(logging.Formatter().formatException(record.exc_info))
            record.exc_info, record.exc_text = None, text
        return True


def install_log_scrubber(logger: logging.Logger | None = None) -> None:
    """Put `ScrubSecrets` on every handler of `logger` (default: the root logger)."""
    for handler in (logger or logging.getLogger()).handlers:
        if not any(isinstance(f, ScrubSecrets) for f in handler.filters):
            handler.addFilter(ScrubSecrets())


def scrub_strings(obj: Any) -> Any:
    """`scrub_text` on every string inside dicts and lists; keys and structure unchanged."""
    if isinstance(obj, dict):
        return {k: scrub_strings(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [scrub_strings(v) for v in obj]
    return scrub_text(obj) if isinstance(obj, str) else obj
