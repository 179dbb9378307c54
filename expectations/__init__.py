"""Great Expectations suites and the release gate."""
