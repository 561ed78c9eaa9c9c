"""Talking to the API server: the client, resources and connection settings."""

from crewlet_operator.kube.client import Client, ObjectList, RawObjectList, WatchEvent
from crewlet_operator.kube.config import RestConfig
from crewlet_operator.kube.params import ListParams, Scope, ShardSelector, WatchParams
from crewlet_operator.kube.resources import Resource
from crewlet_operator.kube.retry import RetryPolicy

__all__ = [
    "Client",
    "ListParams",
    "ObjectList",
    "RawObjectList",
    "Resource",
    "RestConfig",
    "RetryPolicy",
    "Scope",
    "ShardSelector",
    "WatchEvent",
    "WatchParams",
]
