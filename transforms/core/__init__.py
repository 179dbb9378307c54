"""Stage contract, lake, runner and run records."""
