"""Ko-PIQA's own pieces (jobs/recipes/ko-piqa.yaml)."""
