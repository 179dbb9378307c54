"""Recipes as declared run graphs: the recipe file format, the stage registry, engine profiles and
the one orchestrator that runs a recipe's runs (docs/recipes.md)."""
