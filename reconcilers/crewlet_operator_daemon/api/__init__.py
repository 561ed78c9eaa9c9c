"""The crewlet.ai API: pydantic models (the source of truth) and CRD generation."""
