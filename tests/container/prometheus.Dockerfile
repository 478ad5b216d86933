# A stand-in for prom/prometheus, for the container tests only (no registry is reachable where they run): Debian's
# `prometheus` package on the tests' Debian bookworm root (standin.py), laid out as the upstream image is where
# the compose file depends on it: the server as the ENTRYPOINT (the compose service gives only its flags), running
# as `nobody`, its data in /prometheus (compose's named volume takes that folder's owner on first use).
# Debian's release is 2.42; the compose file pins upstream's 3.5 (docs/container.md says what that leaves).
ARG DEBIAN_BASE
FROM ${DEBIAN_BASE}
# policy-rc.d: the package's scripts start no service in the build.
RUN printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d \
 && apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus > /dev/null \
 && rm -rf /var/lib/apt/lists/* /usr/sbin/policy-rc.d \
 && mkdir -p /prometheus && chown nobody:nogroup /prometheus \
 && /usr/bin/prometheus --version
USER nobody
WORKDIR /prometheus
EXPOSE 9090
ENTRYPOINT ["/usr/bin/prometheus"]
