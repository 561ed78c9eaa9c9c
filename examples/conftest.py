"""The examples' envtest suites: one real local control plane for the session, with workloads
(the Tenant example needs the namespace controller to empty a deleted namespace)."""

import os

os.environ.setdefault("CREWLET_ENVTEST_WORKLOADS", "1")

pytest_plugins = ["crewlet_operator.envtest.pytest_plugin"]
