"""The repository's own scripts (not shipped): each runs as ``python hack/<name>.py``, and the
tests import them as ``hack.<name>`` (pytest puts the repository's root on ``sys.path``)."""
