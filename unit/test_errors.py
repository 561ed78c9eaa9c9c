"""Every error the library defines is in one tree, rooted at CrewletError and drawn in errors.py."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from types import ModuleType

import pytest

import crewlet_operator
from crewlet_operator import errors
from crewlet_operator.errors import CrewletError


def library_modules() -> list[ModuleType]:
    """Every module of crewlet_operator, subpackages' included, imported."""
    return [
        importlib.import_module(module.name)
        for module in pkgutil.walk_packages(crewlet_operator.__path__, "crewlet_operator.")
    ]


def library_exceptions() -> set[type[BaseException]]:
    """Every exception class a module of crewlet_operator defines or imports from another: all
    a user of the library may be handed. Warning categories (for ``warnings.warn``) are not
    errors and stay out of the tree."""
    return {
        value
        for module in library_modules()
        for value in vars(module).values()
        if inspect.isclass(value)
        and issubclass(value, BaseException)
        and not issubclass(value, Warning)
        and value.__module__.startswith("crewlet_operator.")
    }


def qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def test_the_walk_reaches_every_subpackage() -> None:
    walked = {module.__name__ for module in library_modules()}
    assert {
        "crewlet_operator.errors",
        "crewlet_operator.cache.informer",
        "crewlet_operator.envtest.process",
        "crewlet_operator.kube.client",
        "crewlet_operator.serving.auth",
    } <= walked


def test_every_library_exception_is_a_crewlet_error() -> None:
    outside = sorted(qualified(c) for c in library_exceptions() if not issubclass(c, CrewletError))
    assert outside == []


def test_every_library_exception_is_defined_in_errors_py() -> None:
    """One home for the tree: a module that raises an error re-exports it from errors.py."""
    elsewhere = sorted(
        qualified(c) for c in library_exceptions() if c.__module__ != "crewlet_operator.errors"
    )
    assert elsewhere == []


def drawn_tree() -> dict[str, str]:
    """Each class the errors.py docstring draws, with the parent it is drawn under."""
    assert errors.__doc__ is not None
    parents: dict[str, str] = {}
    path = ["CrewletError"]
    for line in errors.__doc__.splitlines():
        drawn = re.match(r"^ {4}((?:[│ ] {3})*)[├└]── (\w+)", line)
        if drawn is None:
            continue
        depth = len(drawn.group(1)) // 4
        del path[depth + 1 :]
        parents[drawn.group(2)] = path[-1]
        path.append(drawn.group(2))
    return parents


def test_the_docstring_draws_the_tree_as_it_is() -> None:
    defined = {
        name: cls
        for name, cls in vars(errors).items()
        if inspect.isclass(cls) and issubclass(cls, CrewletError) and cls is not CrewletError
    }
    drawn = drawn_tree()
    assert sorted(drawn) == sorted(defined)
    for name, parent in drawn.items():
        assert defined[name].__bases__[0] is getattr(errors, parent), name


@pytest.mark.parametrize(
    ("error", "standard"),
    [
        (errors.AlreadyOwnedError, ValueError),
        (errors.SchemaError, ValueError),
        (errors.BinaryNotFoundError, FileNotFoundError),
        (errors.ProcessFailedError, RuntimeError),
        (errors.InstallError, RuntimeError),
    ],
)
def test_errors_that_were_standard_ones_still_are(
    error: type[CrewletError], standard: type[Exception]
) -> None:
    assert issubclass(error, standard)


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("crewlet_operator.owners", "AlreadyOwnedError"),
        ("crewlet_operator.workqueue", "QueueShutDown"),
        ("crewlet_operator.manager", "LeadershipLostError"),
        ("crewlet_operator.crd", "SchemaError"),
        ("crewlet_operator.envtest.binaries", "BinaryNotFoundError"),
        ("crewlet_operator.envtest.process", "ProcessFailedError"),
        ("crewlet_operator.envtest.install", "InstallError"),
        ("crewlet_operator.envtest.install", "GoUnavailableError"),
        ("crewlet_operator.kube.client", "NotOwnedError"),
        ("crewlet_operator", "AlreadyOwnedError"),
        ("crewlet_operator", "LeadershipLostError"),
    ],
)
def test_each_error_is_still_importable_where_it_was(module: str, name: str) -> None:
    assert getattr(importlib.import_module(module), name) is getattr(errors, name)


def test_already_owned_error_names_the_object_and_its_controller() -> None:
    obj = {"kind": "ConfigMap", "metadata": {"name": "c", "namespace": "prod"}}
    controller = {"kind": "Crew", "name": "other", "uid": "u-2"}
    error = errors.AlreadyOwnedError(obj, controller)
    assert error.object_key == "prod/c"
    assert error.controller == controller
    assert str(error) == "ConfigMap prod/c is already controlled by Crew other (uid u-2)"
