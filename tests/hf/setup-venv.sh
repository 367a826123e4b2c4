#!/bin/sh
# setup-venv.sh VENV — the Python of the Hugging Face checks (tests/hf.sh):
# a virtual environment at VENV made by Debian's /usr/bin/python3 with
# --system-site-packages (torch and numpy from python3-torch and
# python3-numpy, which must be installed), plus the pinned packages of
# tests/hf/requirements.txt from the package index pip is configured for.
# Prints the environment's python; point SHARDRUN_HF_PYTHON at it.
set -eu
venv=${1:?usage: setup-venv.sh VENV}
here=$(cd "$(dirname "$0")" && pwd)
/usr/bin/python3 -c 'import torch, numpy' || {
    echo "setup-venv.sh: /usr/bin/python3 cannot import torch and numpy (apt-get install python3-torch python3-numpy python3-venv)" >&2
    exit 1
}
[ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv --system-site-packages "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check -r "$here/requirements.txt" >&2
"$venv/bin/python" -c 'import transformers, safetensors, torch, tokenizers, tiktoken, tensorboard, easybuild; print("transformers", transformers.__version__, "safetensors", safetensors.__version__, "torch", torch.__version__, "tokenizers", tokenizers.__version__, "tiktoken", tiktoken.__version__, "tensorboard", tensorboard.__version__)' >&2
echo "$venv/bin/python"
