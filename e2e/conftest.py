"""The e2e suite runs against one real local control plane, with workloads, per session."""

import os

# Garbage collection, StatefulSet pods and Ready pods need the controller-manager, the scheduler
# and kwok; the whole suite shares one control plane, so it runs them all.
os.environ.setdefault("CREWLET_ENVTEST_WORKLOADS", "1")

pytest_plugins = ["crewlet_operator.envtest.pytest_plugin"]
