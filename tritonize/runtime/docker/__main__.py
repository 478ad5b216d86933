"""`python -m tritonize.runtime.docker [compose] > docker/Dockerfile | docker-compose.yml`: the files rendered from
container.py."""

import sys

from ..container import render_compose, render_dockerfile

sys.stdout.write(render_compose() if sys.argv[1:] == ["compose"] else render_dockerfile())
