"""Secrets (HF_TOKEN, WANDB_API_KEY, Ray tokens, ...) never reach a saved config, a log or a message.

A secret is an environment variable whose name says so; its value is replaced by *** wherever trainctl writes.
"""

from __future__ import annotations

import os
import re
from typing import Any

REDACTED = "***"
_SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|APIKEY|ACCESS_KEY|PRIVATE_KEY|CREDENTIAL)", re.I)
# Known secrets whose names do not say so
_KNOWN = {"WANDB_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "MLFLOW_TRACKING_PASSWORD", "RAY_AUTH_TOKEN"}
# config keys that hold secrets
_SECRET_KEY = re.compile(r"(token|secret|password|api_key|apikey)$", re.I)


def is_secret_name(name: str) -> bool:
    return name in _KNOWN or bool(_SECRET_NAME.search(name))


def secret_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """The secret variables in an environment (name -> value), empty or trivially short values left out."""
    env = os.environ if env is None else env
    return {k: v for k, v in env.items() if is_secret_name(k) and v and len(v) >= 6}


class Redactor:
    """Replaces every secret value it knows with ***."""

    def __init__(self, env: dict[str, str] | None = None, extra: list[str] | None = None):
        """`extra`: more values to hide, whatever names they had (the server's token, an MCP server's env)."""
        found = set(secret_env(env).values()) | {v for v in extra or [] if v and len(v) >= 6}
        values = sorted(found, key=len, reverse=True)
        self._pattern = re.compile("|".join(re.escape(v) for v in values)) if values else None

    def text(self, s: str) -> str:
        return self._pattern.sub(REDACTED, s) if self._pattern else s

    def bytes(self, b: bytes) -> bytes:
        if not self._pattern:
            return b
        return self.text(b.decode("utf-8", errors="replace")).encode()

    def tree(self, value: Any, key: str = "") -> Any:
        """A config tree with secret-named keys and secret values replaced."""
        if isinstance(value, dict):
            return {k: self.tree(v, str(k)) for k, v in value.items()}
        if isinstance(value, list):
            return [self.tree(v, key) for v in value]
        if isinstance(value, str):
            if _SECRET_KEY.search(key) and value:
                return REDACTED
            return self.text(value)
        return value
