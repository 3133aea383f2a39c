"""Structured, one-line-per-event logging shared by every daemon."""

from __future__ import annotations

import logging
import sys


class _KeyValueFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "fields", None) or {}
        extra = "".join(f" {k}={v}" for k, v in fields.items())
        line = f"{self.formatTime(record, '%H:%M:%S')} {record.name} {record.levelname} {record.getMessage()}{extra}"
        if record.exc_info:  # logger.exception(...): a bug's traceback belongs in the daemon's log, not lost
            line += "\n" + self.formatException(record.exc_info)
        return line


def setup_logging(name: str, level: str = "INFO") -> logging.Logger:
    """Log to stderr as `time role LEVEL message key=value ...`."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_KeyValueFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    return logging.getLogger(name)


def log(logger: logging.Logger, level: int, message: str, **fields: object) -> None:
    logger.log(level, message, extra={"fields": fields})
