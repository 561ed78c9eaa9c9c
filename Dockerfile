# syntax=docker/dockerfile:1
# The operator image: the daemon as entrypoint, a non-root numeric user, and nothing written to
# the root filesystem at run time (so it runs with readOnlyRootFilesystem).
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY crewlet_operator ./crewlet_operator
COPY crewlet-operator-daemon ./crewlet-operator-daemon
# Both distributions: the library and the daemon on it (which takes the library from here).
RUN pip wheel --no-cache-dir --wheel-dir /wheels . ./crewlet-operator-daemon

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
USER 65532:65532
ENTRYPOINT ["crewlet-operator-daemon"]
