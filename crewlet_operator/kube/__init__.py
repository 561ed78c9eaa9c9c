"""Talking to the API server: the client, resources and connection settings."""

from crewlet_operator.kube.client import Client, ObjectList, RawObjectList, Scope, WatchEvent
from crewlet_operator.kube.config import RestConfig
from crewlet_operator.kube.resources import Resource
from crewlet_operator.kube.retry import RetryPolicy

__all__ = [
    "Client",
    "ObjectList",
    "RawObjectList",
    "Resource",
    "RestConfig",
    "RetryPolicy",
    "Scope",
    "WatchEvent",
]
