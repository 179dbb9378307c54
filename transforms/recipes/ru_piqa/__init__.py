"""Russian PIQA's own pieces (jobs/recipes/ru-piqa.yaml)."""
