"""Tests of deploy/check-manifests.py: the files as committed pass, and each broken
variant (one text substitution in a copy of deploy/) fails with the expected message.

    python3 -m pytest -q deploy/test_check_manifests.py
"""
import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
CHECK = os.path.join(HERE, "check-manifests.py")


def run(deploy_dir):
    return subprocess.run([sys.executable, CHECK, str(deploy_dir)], capture_output=True, text=True, timeout=60)


def test_committed_files_pass():
    r = run(HERE)
    assert r.returncode == 0, r.stderr


# (file under deploy/, text to replace, replacement, expected message)
BROKEN = [
    ("kubernetes/node.yaml", "            - --node-id=$(NODE_NAME)\n", "", "role node needs --node-id"),
    ("kubernetes/node.yaml", "            - --advertise=http://$(NODE_IP):7071\n", "", "role node needs --advertise"),
    ("kubernetes/node.yaml", "--advertise=http://$(NODE_IP):7071", "--advertise=http://$(NODE_IP):7072",
     "name different ports"),
    ("kubernetes/node.yaml", "--advertise=http://$(NODE_IP):7071", "--advertise=http://$(HOST_IP):7071",
     "$(HOST_IP) is not an env variable"),
    ("kubernetes/node.yaml", "fieldPath: spec.nodeName", "fieldPath: metadata.name",
     "NODE_NAME should come from the downward API spec.nodeName"),
    ("kubernetes/node.yaml", "      hostPID: true\n", "", "node role needs hostPID: true"),
    ("kubernetes/node.yaml", "--listen=0.0.0.0:7071", "--listen=127.0.0.1:7071", "node --listen must be"),
    ("kubernetes/node.yaml", "                  name: space-store\n                  key: url",
     "                  name: space-store\n                  key: password",
     "SPACE_STORE_URL comes from different Secret keys"),
    ("kubernetes/control.yaml",
     "            - name: SPACE_NODE_TOKEN\n              valueFrom:\n                secretKeyRef:\n"
     "                  name: space-node-token\n                  key: token\n",
     "            - name: SPACE_NODE_TOKEN\n              value: abcdefghijklmnopqrstuvwxyz\n",
     "SPACE_NODE_TOKEN must come from a Secret"),
    ("kubernetes/control.yaml", "            - name: SPACE_STORE_URL\n", "            - name: SPACE_STORE\n",
     "role control needs SPACE_STORE_URL"),
    ("kubernetes/control.yaml", "- --role=control", "- --role=controller", "is not one of"),
    ("kubernetes/secrets.yaml", '"REPLACE-ME-node-token-48-hex-characters"', '"short"', "shorter than 16"),
    ("kubernetes/secrets.yaml", 'url: "postgresql://', 'url: "sqlite://', "is not a postgresql:// URL"),
    ("systemd/spaced.service.d/node.conf", " --advertise ${SPACE_NODE_ADVERTISE}", "", "role node needs --advertise"),
    ("systemd/spaced.service.d/node.conf", "ExecStart=\n", "", "2 ExecStart lines"),
    ("systemd/spaced.service.d/node.conf", "${SPACE_NODE_ID}", "${SPACE_NODE_NAME}", "uses $SPACE_NODE_NAME"),
    ("systemd/cluster.env.example", "SPACE_NODE_TOKEN=", "#SPACE_NODE_TOKEN=", "needs SPACE_NODE_TOKEN"),
    ("kind/kind-config.yaml", "      - hostPath: /dev/kvm\n        containerPath: /dev/kvm\n", "",
     "a worker lacks the /dev/kvm mount"),
]


@pytest.mark.parametrize("path,old,new,message", BROKEN, ids=[f"{b[0]}:{b[3]}" for b in BROKEN])
def test_broken_variant_fails(tmp_path, path, old, new, message):
    copy = tmp_path / "deploy"
    shutil.copytree(HERE, copy, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    target = copy / path
    text = target.read_text()
    assert old in text, f"test is stale: {path} no longer contains {old!r}"
    target.write_text(text.replace(old, new, 1))
    r = run(copy)
    assert r.returncode != 0, f"check passed although {path} was broken"
    assert message in r.stderr, r.stderr
