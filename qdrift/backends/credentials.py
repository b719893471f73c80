"""API keys for endpoints: read from an environment variable or a JSON file, and kept out of sight.

A key lives in a `Secret`, whose repr and str are redacted, so printing a client, a config or an
exception that holds one shows `Secret('***')`. `scrub` removes a key's text from any string
(error bodies a server echoes back, exception messages) before it is logged or recorded.

The config file is JSON (the standard library reads it on every supported Python; `tomllib`
needs 3.11), an object with the key under "api_key":

    {"api_key": "sk-..."}
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

REDACTED = "***"


class Secret:
    """A credential whose text leaves only through `reveal()`."""

    __slots__ = ("_value",)

    def __init__(self, value: str):
        if not isinstance(value, str) or not value.strip():
            raise ValueError("an API key must be a non-empty string")
        self._value = value.strip()

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return f"Secret('{REDACTED}')"

    __str__ = __repr__

    def __reduce__(self):  # pickling would copy the text out (into a worker, a cache file)
        raise TypeError("a Secret cannot be pickled; read the key again where it is needed")


# A key this short is a test key or a typo, and it occurs inside ordinary words ("ab" in "table"):
# replacing every occurrence mangled whole messages, so it is replaced only where it stands alone.
SHORT_SECRET = 8


def scrub(text: str, secret: Secret | None) -> str:
    """`text` with every occurrence of the secret replaced by ***; a secret shorter than SHORT_SECRET
    characters only where it is not part of a longer word (letters, digits, '_' or '-' on either side)."""
    if secret is None or not text:
        return text
    value = secret.reveal()
    if len(value) >= SHORT_SECRET:
        return text.replace(value, REDACTED)
    return re.sub(rf"(?<![\w-]){re.escape(value)}(?![\w-])", REDACTED, text)


def load_api_key(api_key_env: str | None = "OPENAI_API_KEY", config_file: str | Path | None = None,
                 required: bool = False) -> Secret | None:
    """The key from `config_file` when one is given (it must hold `api_key`), else from the
    environment variable `api_key_env`, else None (an endpoint that needs no key, such as a local
    vLLM server) -- or a ValueError when `required`. Errors name the file or variable, never the key.
    """
    if config_file is not None:
        path = Path(config_file)
        if not path.is_file():
            raise ValueError(f"API key config file {str(path)!r} does not exist")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            # the decoder's message quotes no text, only positions
            raise ValueError(f"API key config file {str(path)!r} is not valid JSON: {e}") from None
        key = data.get("api_key") if isinstance(data, dict) else None
        if not isinstance(key, str) or not key.strip():
            raise ValueError(f"API key config file {str(path)!r} needs a JSON object with a non-empty "
                             "string under \"api_key\"")
        return Secret(key)
    if api_key_env:
        value = os.environ.get(api_key_env, "")
        if value.strip():
            return Secret(value)
    if required:
        raise ValueError(f"no API key: the environment variable {api_key_env!r} is not set or empty "
                         "(set it, or give a JSON config file {\"api_key\": \"...\"})")
    return None
