#!/usr/bin/env bash
# Download, HERE (where pip reaches PyPI), the wheels vllm-load's `run` needs on a GPU machine
# that has no package index: the image of this workplace's GPU machines (python3 3.12 at
# /opt/torch/.venv, /work/.library/device/KINDS.md) holds pandas, matplotlib, scipy, aiohttp,
# uvloop, prometheus-client, jinja2, pyyaml, rich, pillow, psutil, msgpack, requests and
# nvidia-ml-py, but not Locust and its gevent stack, nor orjson. Versions are those vllm-load is
# tested with (setup.cfg's ranges), built for CPython 3.12 on x86-64 Linux.
#
#   bench/gpu/fetch_wheels.sh          # -> bench/gpu/wheels/run/*.whl (about 7.4 MB, git-ignored)
#
# Then carry bench/gpu/wheels/run to the GPU machine; bench/gpu/nvml_check.py installs them
# there with `pip install --no-index --no-deps --target` when Locust is not importable.
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python3}
DEST=bench/gpu/wheels/run
PY_VERSION=${PY_VERSION:-3.12}
mkdir -p "$DEST"
"$PYTHON" -m pip download --no-deps --only-binary=:all: --python-version "$PY_VERSION" \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
    -d "$DEST" \
    locust==2.47.0 configargparse==1.9.0 flask==3.1.3 flask-cors==6.0.5 flask-login==0.6.3 \
    gevent==26.9.0 geventhttpclient==2.6.1 greenlet==3.5.6 zope.event==6.2 zope.interface==8.7 \
    brotli==1.2.1 pyzmq==27.3.0 python-engineio==4.15.1 python-socketio==5.18.1 bidict==0.24.1 \
    simple-websocket==1.1.0 wsproto==1.3.2 websocket-client==1.9.2 blinker==1.9.0 \
    itsdangerous==2.2.0 orjson==3.13.0
ls -1 "$DEST" | wc -l | xargs echo "wheels in $DEST:"
du -sh "$DEST"
