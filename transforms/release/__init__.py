"""The release: the gate (expectations/) on the items, the artifact audit, the release folder and its card.
It sits above the suites and the item code it gates, below the orchestrator that runs it."""
