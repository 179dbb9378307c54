"""The run report (`report.html`): a run's funnel, the chain of runs above it, examples of what each stage
kept and dropped, LLM stages' questions and replies, and the sections its recipe's reports rendered. It reads
every layer below the orchestrator, so it sits above them (nothing under it imports it)."""
