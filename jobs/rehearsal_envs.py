"""Moved to harness/rehearsal/envs.py: this shim keeps `python -m jobs.rehearsal_envs` and the old names
working for one release."""

import sys

from harness.rehearsal.envs import (  # noqa: F401 (re-exported)
    CLUSTER_YAML,
    CPU_TORCH,
    CUML_SUBSTITUTE,
    IMAGE_RE,
    REPO,
    SETUP_NODE,
    NodeType,
    RehearsalError,
    Substitution,
    build_env,
    dockerfile_for,
    dockerfile_steps,
    env_fingerprint,
    image_python,
    main,
    node_env,
    plan_env,
    read_cluster,
    substitute,
)

if __name__ == "__main__":
    sys.exit(main())
