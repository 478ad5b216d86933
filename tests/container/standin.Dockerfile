# A stand-in for NVIDIA's nvcr.io/nvidia/tritonserver image, for the container tests only (no registry
# is reachable where they run). Built by tests/container/standin.py on a Debian bookworm root made with
# mmdebstrap and `docker import`, laid out as NGC's image is where docker/Dockerfile depends on it:
#   tritonserver on the PATH (/opt/tritonserver/bin), the Python backend with its stub in
#   /opt/tritonserver/backends/python (the server's default backend directory), python3 and pip,
#   numpy in the interpreter the stub embeds, and Triton's native onnxruntime backend in
#   /opt/tritonserver/backends/onnxruntime/ (libtriton_onnxruntime.so beside its libonnxruntime.so.1).
# The server is the nvidia-pytriton wheel's Triton 2.51, which ships the Python backend alone: the onnxruntime
# backend is the one `make backend` builds from the r24.10 release sources (tritonize/runtime/native_backend.py),
# so the stand-in serves each step's config.pbtxt as NVIDIA's image does. The wheel renamed its server library
# (libtritonserver-<hash>.so), which the backend links by its plain name: the folder's libtritonserver.so
# names it (NativeBackend.lay_out; the loader maps the one copy the server already holds). onnxruntime's
# pip package is installed too, for the fused step (configs/fused.pbtxt). Production builds on NVIDIA's
# image (docs/container.md).
ARG DEBIAN_BASE

# `python`: Debian's Python 3.11 with pip, as python:3.11-slim is for the API image (docker/api.Dockerfile).
FROM ${DEBIAN_BASE} AS python
# The host's CA bundle: pip reaches PyPI through whatever the host trusts.
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PIP_BREAK_SYSTEM_PACKAGES=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
RUN python3 -m pip --version

# Installs from the wheels next to this file (requirements.lock's pins, hash-checked); only what they
# install reaches the final stage.
FROM python AS install
ARG PYTHON_VERSION
ARG WHEEL_SERVER_DIR
ARG WHEEL_LIBS_DIR
ARG WHEEL_STUBS_DIR
ARG STUB_NAME
COPY wheels /tmp/wheels
COPY python.txt triton.txt /tmp/
RUN python3 -m pip install --no-cache-dir --no-index --find-links /tmp/wheels --no-deps --require-hashes \
      -r /tmp/python.txt \
 && python3 -m pip install --no-cache-dir --no-index --find-links /tmp/wheels --no-deps --require-hashes \
      --target /tmp/wheel -r /tmp/triton.txt \
 && mkdir -p /opt/tritonserver \
 && mv /tmp/wheel/${WHEEL_SERVER_DIR}/bin /tmp/wheel/${WHEEL_SERVER_DIR}/backends /tmp/wheel/${WHEEL_SERVER_DIR}/caches \
       /opt/tritonserver/ \
 && mv /tmp/wheel/${WHEEL_LIBS_DIR} /opt/tritonserver/lib \
 && cp /tmp/wheel/${WHEEL_SERVER_DIR}/${WHEEL_STUBS_DIR}/${PYTHON_VERSION}/${STUB_NAME} \
       /opt/tritonserver/backends/python/${STUB_NAME} \
 && find /opt/tritonserver -name __pycache__ -prune -exec rm -rf {} +

FROM python AS triton
ARG STUB_NAME
COPY --from=install /usr/local /usr/local
COPY --from=install /opt/tritonserver /opt/tritonserver
COPY onnxruntime /opt/tritonserver/backends/onnxruntime
# The server finds its libraries by its RPATH ($ORIGIN/../lib); the stub, a separate binary, through this.
ENV PATH=/opt/tritonserver/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LD_LIBRARY_PATH=/opt/tritonserver/lib
RUN (tritonserver --help 2>&1 || true) | grep -q -- --model-repository \
 && ! ldd /opt/tritonserver/backends/python/${STUB_NAME} | grep "not found" \
 && ! ldd /opt/tritonserver/backends/onnxruntime/libtriton_onnxruntime.so | grep "not found" \
 && ldd /opt/tritonserver/backends/onnxruntime/libtriton_onnxruntime.so | grep -q "libtritonserver.so => /opt/tritonserver/backends/onnxruntime/libtritonserver.so" \
 && python3 -c "import numpy, onnxruntime"
