# The tritonize API image: `tritonize api` (OpenAI, Cohere/Jina and text-embeddings-inference routes) in front
# of Triton over gRPC. Build it from the checkout's root:
#   docker build -f docker/api.Dockerfile -t tritonize-api .
# Every package comes from tritonize/data/api-image.lock (`make lock`): wheels only, hash-checked.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
FROM ${PYTHON_IMAGE}

COPY tritonize/data/api-image.lock /tmp/api-image.lock
RUN python3 -m pip install --no-cache-dir --disable-pip-version-check --no-deps --only-binary=:all: \
      --require-hashes -r /tmp/api-image.lock \
 && rm /tmp/api-image.lock

# The package itself, built with the locked setuptools (no build isolation: nothing unlocked is fetched).
COPY pyproject.toml setup.py README.md /src/
COPY tritonize /src/tritonize
COPY templates /src/templates
RUN python3 -m pip install --no-cache-dir --disable-pip-version-check --no-deps --no-build-isolation /src \
 && rm -rf /src \
 && python3 -c "import tritonize.api.app"

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
# An unprivileged user; the repository is mounted read-only at /models.
USER 1000:1000
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=10s --start-period=60s --retries=3 \
  CMD python3 -c "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8080/health', timeout=8).status != 200)"
CMD ["tritonize", "api", "--repository", "/models", "--grpc-url", "tritonserver:8001", "--host", "0.0.0.0", "--port", "8080"]
