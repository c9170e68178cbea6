"""structlog configured to write JSON lines to stderr — never stdout, which is the wire."""

from __future__ import annotations

import logging
import sys
from typing import TextIO

import structlog

LEVELS = ("debug", "info", "warning", "error", "critical")


def configure(level: str = "warning", stream: TextIO | None = None) -> None:
    """Route structlog (and stdlib logging, for libraries) to ``stream`` (stderr) as JSON lines."""
    out = stream if stream is not None else sys.stderr
    numeric = logging.getLevelName(level.upper())
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=True,
    )
    # Libraries log through the standard library (asyncio, for one): the same JSON lines, same stream.
    handler = logging.StreamHandler(out)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                structlog.processors.JSONRenderer(),
            ],
            foreign_pre_chain=[
                structlog.stdlib.add_log_level,
                structlog.stdlib.add_logger_name,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
            ],
        )
    )
    logging.basicConfig(handlers=[handler], level=numeric, force=True)
