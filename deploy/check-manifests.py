#!/usr/bin/python3
"""Offline checks of deploy/: YAML syntax and the cross-references a cluster would only
reject at apply time (or, worse, accept and then never schedule).

No Kubernetes API server is needed (none is available where space is developed), so
this is not `kubectl --dry-run`: it checks the structure we rely on, not the full
schemas. Needs PyYAML (Debian package python3-yaml).

    deploy/check-manifests.py            exit 0 when every check passes
"""
import configparser
import os
import sys

try:
    import yaml
except ImportError:
    sys.exit("check-manifests: PyYAML is missing (apt-get install python3-yaml)")

HERE = os.path.dirname(os.path.abspath(__file__))
NAMESPACE = "space-system"
WORKLOADS = {"Deployment", "DaemonSet", "StatefulSet"}
errors = []


def err(where, msg):
    errors.append(f"{where}: {msg}")


def load(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if "\t" in text:
        err(path, "tab character (YAML indentation must be spaces)")
    try:
        return [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        err(path, f"YAML syntax: {e}")
        return []


def check_workload(where, doc, secrets):
    spec = doc.get("spec", {})
    tpl = spec.get("template", {})
    labels = tpl.get("metadata", {}).get("labels", {})
    match = spec.get("selector", {}).get("matchLabels", {})
    if not match or any(labels.get(k) != v for k, v in match.items()):
        err(where, "selector.matchLabels is empty or does not match the template's labels")
    pod = tpl.get("spec", {})
    volumes = {v["name"] for v in pod.get("volumes", [])}
    volumes |= {c["metadata"]["name"] for c in spec.get("volumeClaimTemplates", [])}
    containers = pod.get("containers", [])
    if not containers:
        err(where, "no containers")
    ports = set()
    for c in containers:
        cw = f"{where} container {c.get('name')}"
        if not c.get("name") or not c.get("image"):
            err(cw, "container needs a name and an image")
        for p in c.get("ports", []):
            if len(p.get("name", "")) > 15:
                err(cw, f"port name {p['name']} longer than 15 characters")
            ports.add(p.get("name"))
            ports.add(p.get("containerPort"))
        for m in c.get("volumeMounts", []):
            if m.get("name") not in volumes:
                err(cw, f"volumeMount {m.get('name')} has no volume")
            if not str(m.get("mountPath", "")).startswith("/"):
                err(cw, f"volumeMount {m.get('name')} mountPath is not absolute")
        for e in c.get("env", []):
            ref = e.get("valueFrom", {}).get("secretKeyRef")
            if ref and ref.get("key") not in secrets.get(ref.get("name"), set()):
                err(cw, f"env {e.get('name')} refers to missing secret key {ref.get('name')}/{ref.get('key')}")
        for probe in ("readinessProbe", "livenessProbe"):
            port = c.get(probe, {}).get("httpGet", {}).get("port")
            if port is not None and port not in ports:
                err(cw, f"{probe} port {port} is not a container port")
    if doc["kind"] == "DaemonSet":
        mounts = {m["mountPath"] for c in containers for m in c.get("volumeMounts", [])}
        if "/dev/kvm" not in mounts:
            err(where, "node DaemonSet does not mount /dev/kvm")
    return labels, ports


def check_kubernetes(d):
    docs = []
    for name in sorted(os.listdir(d)):
        if name.endswith(".yaml"):
            docs += [(os.path.join(d, name), doc) for doc in load(os.path.join(d, name))]
    secrets = {}
    for path, doc in docs:
        where = f"{os.path.basename(path)} {doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
        if doc.get("kind") == "Kustomization":
            for r in doc.get("resources", []):
                if not os.path.exists(os.path.join(d, r)):
                    err(where, f"resource {r} does not exist")
            continue
        for field in ("apiVersion", "kind"):
            if not doc.get(field):
                err(where, f"missing {field}")
        if not doc.get("metadata", {}).get("name"):
            err(where, "missing metadata.name")
        if doc.get("kind") != "Namespace" and doc.get("metadata", {}).get("namespace") != NAMESPACE:
            err(where, f"not in namespace {NAMESPACE}")
        if doc.get("kind") == "Secret":
            secrets[doc["metadata"]["name"]] = set(doc.get("stringData", {})) | set(doc.get("data", {}))
    pods = []
    for path, doc in docs:
        if doc.get("kind") in WORKLOADS:
            where = f"{os.path.basename(path)} {doc['kind']}/{doc['metadata']['name']}"
            pods.append(check_workload(where, doc, secrets))
    for path, doc in docs:
        if doc.get("kind") != "Service":
            continue
        where = f"{os.path.basename(path)} Service/{doc['metadata']['name']}"
        sel = doc.get("spec", {}).get("selector", {})
        targets = [ports for labels, ports in pods if sel and all(labels.get(k) == v for k, v in sel.items())]
        if not targets:
            err(where, "selector matches no workload")
        for p in doc.get("spec", {}).get("ports", []):
            tp = p.get("targetPort", p.get("port"))
            if targets and not any(tp in ports for ports in targets):
                err(where, f"targetPort {tp} is not a port of the selected pods")
    return len(docs)


def check_kind(path):
    for doc in load(path):
        if doc.get("kind") != "Cluster" or not doc.get("nodes"):
            err(path, "not a Kind Cluster with nodes")
        workers = [n for n in doc.get("nodes", []) if n.get("role") == "worker"]
        for n in workers:
            if not any(m.get("containerPath") == "/dev/kvm" for m in n.get("extraMounts", [])):
                err(path, "a worker lacks the /dev/kvm mount")
            if n.get("labels", {}).get("space.dev/kvm") != "true":
                err(path, "a worker lacks the space.dev/kvm=true label the DaemonSet selects")


def check_systemd(path):
    cp = configparser.ConfigParser(strict=True, interpolation=None)
    cp.optionxform = str
    try:
        cp.read(path, encoding="utf-8")
    except configparser.Error as e:
        err(path, f"unit syntax: {e}")
        return
    for section, key in (("Unit", "Description"), ("Service", "ExecStart"), ("Install", "WantedBy")):
        if not cp.has_option(section, key):
            err(path, f"missing [{section}] {key}")
    if not cp.get("Service", "ExecStart", fallback="").startswith("/"):
        err(path, "ExecStart must be an absolute path")


def main():
    n = check_kubernetes(os.path.join(HERE, "kubernetes"))
    check_kind(os.path.join(HERE, "kind", "kind-config.yaml"))
    check_systemd(os.path.join(HERE, "systemd", "spaced.service"))
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        sys.exit(f"check-manifests: {len(errors)} problem(s)")
    print(f"check-manifests: {n} Kubernetes documents, the Kind config and the systemd unit are consistent")


if __name__ == "__main__":
    main()
