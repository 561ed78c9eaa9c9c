"""kubernetes-asyncio's configuration loaders, without its generated API models.

The client speaks the API on plain dicts and takes from kubernetes-asyncio what it is for here:
kubeconfig loading (contexts, exec credential plugins, OIDC and GCP auth providers), the
in-cluster configuration with its token rotation, and the ``Configuration`` they fill in. But
importing any part of kubernetes-asyncio runs its package ``__init__``, which imports every
generated API and model class (about 770 modules, some 70 MiB of RSS) that a raw-dict client never
touches.

So the two packages whose ``__init__`` does that, ``kubernetes_asyncio`` and
``kubernetes_asyncio.client``, are registered here with their ``__init__`` deferred: their
submodules import as usual, and the ``__init__`` runs, in full, the first time a program reads a
name it defines (``kubernetes_asyncio.client.CoreV1Api``, say). A program that also uses
kubernetes-asyncio's typed API gets it unchanged, only later; one that imported kubernetes-asyncio
before this module is left as it is.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType
from typing import Any


def _defer_init(name: str) -> ModuleType:
    """Register package ``name`` so that its ``__init__`` runs at the first read of a name it
    defines, not at import; return the module (the real one if it is imported already)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        raise ImportError(f"{name} is not an importable package")
    loader = spec.loader
    module = importlib.util.module_from_spec(spec)

    def lookup(attribute: str) -> Any:
        # PEP 562: called only for names the module does not have yet. A submodule is imported
        # as the import system would (``from package import submodule`` asks for it first);
        # any other name runs the __init__, after the hook has removed itself, so that the
        # __init__, and any later miss, sees an ordinary module.
        if not attribute.startswith("__") and importlib.util.find_spec(f"{name}.{attribute}"):
            return importlib.import_module(f"{name}.{attribute}")
        del module.__dict__["__getattr__"]
        loader.exec_module(module)
        return getattr(module, attribute)

    module.__dict__["__getattr__"] = lookup
    sys.modules[name] = module
    return module


def _api_client(*args: Any, **kwargs: Any) -> Any:
    """kubernetes-asyncio's ``ApiClient``, imported when one is made (only by the loaders'
    ``new_client_from_config``, which this library never calls)."""
    from kubernetes_asyncio.client.api_client import ApiClient  # noqa: PLC0415

    return ApiClient(*args, **kwargs)


_defer_init("kubernetes_asyncio")
_client_package = _defer_init("kubernetes_asyncio.client")

from kubernetes_asyncio.client.configuration import Configuration  # noqa: E402

# kube_config.py reads both names from the package at import; giving them here keeps its
# __init__ (and the models) from running.
if "Configuration" not in _client_package.__dict__:
    _client_package.__dict__["Configuration"] = Configuration
if "ApiClient" not in _client_package.__dict__:
    _client_package.__dict__["ApiClient"] = _api_client

from kubernetes_asyncio.config import (  # noqa: E402
    ConfigException,
    load_incluster_config,
    load_kube_config,
)

__all__ = ["ConfigException", "Configuration", "load_incluster_config", "load_kube_config"]
