"""Error types shared across layers: a leaf module, so any config or policy can raise them without import cycles."""

from __future__ import annotations

from typing import Any


class ConfigError(ValueError):
    """A config value is invalid; `field` is its dotted name."""

    def __init__(self, field_name: str, value: Any, reason: str):
        super().__init__(f"{field_name}={value!r}: {reason}")
        self.field = field_name
        self.value = value
