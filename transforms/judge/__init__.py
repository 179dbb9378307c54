"""Judges measured on labelled rows: labelled-row files and held-out splits, a linear classifier on sentence
embeddings, the prefilter and ensemble stages, metrics and prompt-injection checks (docs/judges.md). What only
Ko-PIQA uses (the KiN seed split, its cascade evaluation and report) is in transforms/recipes/ko_piqa/.
Heavy imports (sklearn, matplotlib, embedding engines) happen inside the functions that need them."""
