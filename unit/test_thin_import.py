"""Importing the library loads none of kubernetes-asyncio's generated API models (some 70 MiB of
RSS a raw-dict client never uses), and a program that wants them still gets them."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def run(code: str) -> str:
    """``code`` in a fresh interpreter (imports are per process); its stdout."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_importing_the_library_loads_no_generated_model() -> None:
    out = run(
        """
        import sys
        import crewlet_operator
        from crewlet_operator import Client, Manager
        loaded = [m for m in sys.modules if m.startswith("kubernetes_asyncio.client.")]
        print(len([m for m in loaded if ".models." in m or ".api." in m]))
        """
    )
    assert out == "0"


def test_the_typed_api_still_loads_when_a_program_asks_for_it() -> None:
    """The deferred package __init__ runs in full at the first name it defines."""
    out = run(
        """
        import sys
        import crewlet_operator
        from kubernetes_asyncio import client, config, watch
        from kubernetes_asyncio.client import CoreV1Api, V1Pod
        from crewlet_operator.kube._kubernetes_asyncio import Configuration
        assert client.Configuration is Configuration
        assert config.load_kube_config is not None and watch.Watch is not None
        print(CoreV1Api.__name__, V1Pod.__name__)
        """
    )
    assert out == "CoreV1Api V1Pod"


def test_kubernetes_asyncio_imported_first_is_left_as_it_is() -> None:
    out = run(
        """
        import kubernetes_asyncio
        import kubernetes_asyncio.client
        import crewlet_operator
        from crewlet_operator.kube._kubernetes_asyncio import Configuration
        assert kubernetes_asyncio.client.Configuration is Configuration
        print(kubernetes_asyncio.client.CoreV1Api.__name__)
        """
    )
    assert out == "CoreV1Api"
