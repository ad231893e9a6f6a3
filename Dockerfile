# The vllm-load image: the CLI, Locust, and the simulator. One image serves every role
# (master, worker, sim); the role is the command.
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY setup.cfg pyproject.toml README.md ./
COPY vllm_load ./vllm_load
COPY locustfiles ./locustfiles
RUN pip install . && vllm-load --help >/dev/null

WORKDIR /work
# 8089: Locust web UI (master); 5557: master <-> workers; 8000: simulator
EXPOSE 8089 5557 8000
ENTRYPOINT ["vllm-load"]
CMD ["--help"]
