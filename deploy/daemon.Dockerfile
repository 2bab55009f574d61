# syntax=docker/dockerfile:1
# A worker, `lakeshore-daemon`, on a CUDA runtime image (or any image: BASE_IMAGE).
#
#   docker build -f deploy/daemon.Dockerfile -t lakeshore-daemon .      # from the repository root
#   docker build -f deploy/daemon.Dockerfile --build-arg BASE_IMAGE=python:3.11-slim -t lakeshore-daemon:cpu .
#   docker run --gpus all -e LAKESHORE_URL=https://lakeshore.internal -e LAKESHORE_TOKEN=... \
#       lakeshore-daemon lakeshore-daemon --queue training-h100
#
# Jobs import your code: build FROM this image and `pip install` your project (and torch) into
# /opt/lakeshore, or copy its modules into /work (the daemon imports from its working folder).
ARG BASE_IMAGE=nvidia/cuda:12.4.1-runtime-ubuntu22.04
ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS wheel
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY sdk/ sdk/
COPY server/ server/
COPY daemon/ daemon/
COPY controller/ controller/
COPY providers/ providers/
COPY cli/ cli/
COPY systemd/ systemd/
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM ${BASE_IMAGE}
# daemon: structlog, psutil; gpu: NVML for the GPU inventory. Add otel for tracing.
ARG EXTRAS=daemon,gpu
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    LAKESHORE_HOME=/var/lib/lakeshore \
    PATH=/opt/lakeshore/bin:$PATH
# CUDA runtime images have no Python: take the distribution's (3.10 on Ubuntu 22.04, which the
# package supports). A Python image already has one. Either way the package lives in a venv.
RUN if ! command -v python3 >/dev/null 2>&1; then \
        apt-get update \
        && apt-get install -y --no-install-recommends python3 python3-venv \
        && rm -rf /var/lib/apt/lists/*; \
    fi \
    && python3 -m venv /opt/lakeshore
COPY --from=wheel /wheels /wheels
RUN wheel="$(ls /wheels/*.whl)" \
    && pip install --no-cache-dir "${wheel}[${EXTRAS}]" \
    && rm -rf /wheels \
    && useradd --system --uid 10001 --user-group --create-home --home-dir /var/lib/lakeshore lakeshore \
    && mkdir -p /work && chown lakeshore:lakeshore /work
COPY --chmod=755 deploy/entrypoint.sh /usr/local/bin/lakeshore-entrypoint
USER lakeshore
WORKDIR /work
# SIGTERM drains (stop claiming, finish in flight up to a grace); give it time before SIGKILL.
STOPSIGNAL SIGTERM
ENTRYPOINT ["lakeshore-entrypoint"]
CMD ["lakeshore-daemon", "--queue", "default"]
