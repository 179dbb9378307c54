"""Imported by every Python process started with tests/other_cpu on PYTHONPATH (scripts/test.sh's other-CPU
passes): applies other_cpu_sim in Ray's workers as in the test process. Does nothing without
PIQAFORGE_TEST_OTHER_CPU, or in a process that cannot import the project (Ray's own helpers)."""

import os

OTHER_CPU = ""
if os.environ.get("PIQAFORGE_TEST_OTHER_CPU"):
    try:
        import other_cpu_sim

        OTHER_CPU = other_cpu_sim.apply()
    except ImportError:
        pass
