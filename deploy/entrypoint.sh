#!/bin/sh
# The images' entry point: reads a secret from a file when the environment names one, then runs
# the command. A token in a file (a compose volume, a Docker or Kubernetes secret) never sits in
# the image, in `docker inspect`, or in the process list, which an environment variable would.
set -eu
if [ -n "${LAKESHORE_TOKEN_FILE:-}" ] && [ -z "${LAKESHORE_TOKEN:-}" ]; then
    # The server writes its first token when it first starts: wait for it, up to a minute.
    for _ in $(seq 60); do
        [ -s "$LAKESHORE_TOKEN_FILE" ] && break
        sleep 1
    done
    LAKESHORE_TOKEN="$(cat "$LAKESHORE_TOKEN_FILE")"
    export LAKESHORE_TOKEN
fi
exec "$@"
