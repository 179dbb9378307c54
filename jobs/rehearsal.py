"""Moved to harness/rehearsal/ (`python -m harness.rehearsal`): this shim keeps `python -m jobs.rehearsal`
and the old names working for one release."""

import sys

from harness.rehearsal.nodes import (  # noqa: F401 (re-exported)
    NODE_RESOURCE,
    Cluster,
    free_ports,
    list_nodes,
    node_process_env,
    node_type_of,
    say,
    start_cluster,
    start_server,
)
from harness.rehearsal.recipes import (  # noqa: F401 (re-exported)
    Outcome,
    expected_types,
    law_lines,
    placement_lines,
    refusal_check,
    run_recipe,
    swapped_roles,
)
from harness.rehearsal.run import CONFIG, RECIPES, main  # noqa: F401 (re-exported)

if __name__ == "__main__":
    sys.exit(main())
