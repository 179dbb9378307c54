"""Test harnesses that run the project as a cluster would (not part of the installed package)."""
