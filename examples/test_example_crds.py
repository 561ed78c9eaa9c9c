"""Every example's CRD file is what its pydantic model generates (``python <example>.py crds``
writes it), so a model changed without its file fails here."""

from __future__ import annotations

from pathlib import Path

from tenants import tenant_crd
from widgets import widget_crd

from crewlet_operator.crd import drift

HERE = Path(__file__).resolve().parent


def test_the_crd_files_are_what_the_models_generate() -> None:
    assert drift(HERE, [tenant_crd()]) == []
    assert drift(HERE, [widget_crd()]) == []
