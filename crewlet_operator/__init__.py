"""crewlet-operator (public API assembled once every module exists)."""
