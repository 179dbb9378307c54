"""J-PIQA's own pieces (jobs/recipes/j-piqa.yaml)."""
