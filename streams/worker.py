"""Entry point for ``faust -A streams.worker worker`` (and ``sickbay worker``)."""

from __future__ import annotations

from streams.app import create_app, tune_the_gc
from streams.pipeline import build
from streams.settings import Settings

settings = Settings()
app = create_app(settings)
pipeline = build(app, settings)
tune_the_gc()
