# syntax=docker/dockerfile:1
# The control plane, `lakeshore server`, on PostgreSQL (LAKESHORE_STORE) or SQLite in its home.
#
#   docker build -f deploy/server.Dockerfile -t lakeshore-server .      # from the repository root
#   docker run -p 8765:8765 -e LAKESHORE_STORE=postgresql://... lakeshore-server
#
# Its first start creates namespace `default` and an admin token in $LAKESHORE_HOME/token
# (/var/lib/lakeshore/token: keep that folder on a volume). See deploy/compose.yaml.
ARG PYTHON_IMAGE=python:3.11-slim

# The package as a wheel, built apart so the image holds no sources and no build tools.
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

FROM ${PYTHON_IMAGE}
# server: the ASGI stack and /metrics; postgres: psycopg. Add otel for tracing.
ARG EXTRAS=server,postgres
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    LAKESHORE_HOME=/var/lib/lakeshore
COPY --from=wheel /wheels /wheels
RUN wheel="$(ls /wheels/*.whl)" \
    && pip install --no-cache-dir "${wheel}[${EXTRAS}]" \
    && rm -rf /wheels \
    && useradd --system --uid 10001 --user-group --create-home --home-dir /var/lib/lakeshore lakeshore
COPY --chmod=755 deploy/entrypoint.sh /usr/local/bin/lakeshore-entrypoint
USER lakeshore
WORKDIR /var/lib/lakeshore
VOLUME ["/var/lib/lakeshore"]
EXPOSE 8765
HEALTHCHECK --interval=5s --timeout=3s --start-period=10s --retries=5 \
    CMD ["python", "-c", "import urllib.request as r; r.urlopen('http://127.0.0.1:8765/readyz', timeout=2)"]
ENTRYPOINT ["lakeshore-entrypoint"]
CMD ["lakeshore", "server", "--host", "0.0.0.0", "--port", "8765"]
