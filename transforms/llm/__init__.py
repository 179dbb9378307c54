"""LLM engines behind one interface; see transforms/llm/base.py. Nothing heavy is imported here."""
