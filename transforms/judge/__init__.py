"""Judges of the Ko-PIQA cascade measured on labelled rows: seed labels, a linear classifier on
sentence embeddings, metrics, prompt-injection checks and the report section (docs/judges.md).
Heavy imports (sklearn, matplotlib, embedding engines) happen inside the functions that need them."""
