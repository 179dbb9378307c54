"""The injection guard moved to transforms/text/guard.py (below the LLM layer); the old import path."""

from transforms.text.guard import flagged, injection_flags, sanitize  # noqa: F401
