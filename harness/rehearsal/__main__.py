"""`python -m harness.rehearsal`: the cluster rehearsal (scripts/cluster_rehearsal.sh)."""

import sys

from harness.rehearsal.run import main

sys.exit(main())
