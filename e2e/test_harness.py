"""The test harness's own messages and fixtures, as a newcomer meets them."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from crewlet_operator import Client, Manager, Request, Resource
from crewlet_operator.testing import manager_options_for_tests, run_manager

UNSERVED = Resource("nowhere.example.com", "v1", "Gadget", "gadgets")


async def test_a_start_waiting_for_an_unserved_kind_names_it_and_says_install_its_crd(
    kube_client: Client,
) -> None:
    manager = Manager(kube_client, manager_options_for_tests("gadgets"))

    async def reconcile(request: Request) -> None:
        pass

    manager.controller("gadgets").for_(UNSERVED).complete(reconcile)
    with pytest.raises(TimeoutError) as raised:
        async with run_manager(manager, timeout=3):
            pass
    assert str(raised.value) == (
        "the manager did not start within 3s: Gadget.nowhere.example.com "
        "(nowhere.example.com/v1 gadgets) is not served by the API server: install its CRD"
    )


SUITE = """
import pytest

from crewlet_operator import CONFIG_MAP, NAMESPACE

pytestmark = pytest.mark.asyncio  # no loop scope: the plugin runs it on the session's loop


async def test_one(kube_client, namespace, tmp_path_factory):
    await kube_client.create(CONFIG_MAP, {"metadata": {"name": "a", "namespace": namespace}})
    (tmp_path_factory.getbasetemp() / "namespace").write_text(namespace)


async def test_two(kube_client, tmp_path_factory):
    used = (tmp_path_factory.getbasetemp() / "namespace").read_text()
    assert used.startswith("t-test-one-")
    assert await kube_client.get_or_none(NAMESPACE, used) is None, "not gone after its test"
"""


def test_a_suite_that_sets_nothing_but_the_plugin_runs_on_the_session_loop(
    tmp_path: Path,
) -> None:
    """No loop-scope settings, no asyncio_mode: the session's client works in each test, and
    with workloads the namespace fixture's teardown waits until its namespace is gone."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "conftest.py").write_text(
        'pytest_plugins = ["crewlet_operator.envtest.pytest_plugin"]\n'
    )
    (tmp_path / "test_tiny.py").write_text(textwrap.dedent(SUITE))
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--envtest-workloads"],
        check=False,
        cwd=tmp_path,
        env={**os.environ, "CREWLET_ENVTEST_WORKLOADS": "1"},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert ran.returncode == 0, ran.stdout[-4000:] + ran.stderr[-2000:]
    assert "2 passed" in ran.stdout
