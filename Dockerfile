# syntax=docker/dockerfile:1
# The operator image: the daemon as entrypoint, a non-root numeric user, and nothing written to
# the root filesystem at run time (so it runs with readOnlyRootFilesystem). Its dependencies are
# installed from requirements/image.txt (make lock) with their hashes required, as the release
# rehearsal (hack/release.py) builds the same image without a container engine.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY crewlet_operator ./crewlet_operator
COPY reconcilers ./reconcilers
# Both distributions: the library and the daemon on it; their dependencies come from the lock.
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels . ./reconcilers

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
COPY requirements/image.txt /tmp/image.txt
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --require-hashes --only-binary=:all: -r /tmp/image.txt \
 && pip install --no-cache-dir --no-deps /wheels/*.whl \
 && rm -rf /wheels /tmp/image.txt
USER 65532:65532
ENTRYPOINT ["crewlet-operator-daemon"]
