#!/usr/bin/python3
"""Offline checks of deploy/: YAML syntax and the cross-references a cluster would only
reject at apply time (or, worse, accept and then never schedule).

No Kubernetes API server is needed (none is available where space is developed), so
this is not `kubectl --dry-run`: it checks the structure we rely on, not the full
schemas. Besides the Kubernetes cross-references it checks how each container and
systemd unit starts spaced against what spaced demands of its role (cluster_check_opts
in src/daemon/cluster/cluster.c): control and node get SPACE_STORE_URL (a PostgreSQL URL)
and SPACE_NODE_TOKEN, both from Secrets in Kubernetes and the same Secret keys in both
roles; a node gets --node-id and --advertise http://HOST:PORT with the port it listens
on, on the host network and host PID namespace. Needs PyYAML (Debian: python3-yaml).

    deploy/check-manifests.py [DEPLOY_DIR]   exit 0 when every check passes
"""
import os
import re
import shlex
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


ROLES = {"all", "control", "node"}
TOKEN_MIN = 16  # CLUSTER_TOKEN_MIN in src/daemon/cluster/cluster.h
PG_PREFIXES = ("postgres://", "postgresql://")  # store_url_is_pg also takes host=/dbname=
VAR_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def spaced_opts(args):
    """--opt=value and --opt value forms -> {opt: value}; flags map to True."""
    opts, i = {}, 0
    while i < len(args):
        a = str(args[i])
        if a.startswith("--"):
            name, eq, val = a[2:].partition("=")
            if not eq and i + 1 < len(args) and not str(args[i + 1]).startswith("--"):
                val, i = str(args[i + 1]), i + 1
            opts[name] = val if (eq or val) else True
        i += 1
    return opts


def url_port(url):
    m = re.match(r"^http://[^/:]+:(\d+)/?$", url)
    return m and int(m.group(1))


def check_role_opts(where, opts, env_has):
    """Checks spaced's options for its role; env_has(name) says whether a variable is
    set. Returns the role."""
    role = opts.get("role", "all")
    if role not in ROLES:
        err(where, f"--role {role} is not one of {sorted(ROLES)}")
    if role in ("control", "node"):
        if not env_has("SPACE_STORE_URL") and "store" not in opts:
            err(where, f"role {role} needs SPACE_STORE_URL (the shared PostgreSQL)")
        if not env_has("SPACE_NODE_TOKEN"):
            err(where, f"role {role} needs SPACE_NODE_TOKEN")
    if role == "node":
        for o in ("node-id", "advertise"):
            if not isinstance(opts.get(o), str) or not opts[o]:
                err(where, f"role node needs --{o}")
        adv, listen = opts.get("advertise"), opts.get("listen", "127.0.0.1:7070")
        if isinstance(adv, str) and adv:
            if not url_port(adv):
                err(where, f"--advertise {adv} is not http://HOST:PORT")
            elif str(url_port(adv)) != str(listen).rpartition(":")[2]:
                err(where, f"--advertise {adv} and --listen {listen} name different ports")
    return role


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
    roles = {}
    for c in pod.get("initContainers", []) + containers:
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
        if runs_spaced(c):
            roles[check_spaced_container(cw, c, pod, secrets)] = c
    if "node" in roles:
        mounts = {m["mountPath"] for m in roles["node"].get("volumeMounts", [])}
        if doc["kind"] != "DaemonSet":
            err(where, "the node role runs as a DaemonSet (one per KVM host)")
        if "/dev/kvm" not in mounts:
            err(where, "node role does not mount /dev/kvm")
        for field in ("hostNetwork", "hostPID"):
            if pod.get(field) is not True:
                err(where, f"node role needs {field}: true (sandbox networking, adoption of VMs)")
    return labels, ports, roles


def runs_spaced(c):
    """The image's entry point is spaced (image space:*) unless a command replaces it."""
    if c.get("command"):
        return os.path.basename(str(c["command"][0])) == "spaced"
    return str(c.get("image", "")).rpartition("/")[2].split(":")[0] == "space"


# (role, variable) -> (secret, key) seen, to check both roles share the same Secret keys.
secret_of = {}


def check_spaced_container(cw, c, pod, secrets):
    env = {e.get("name"): e for e in c.get("env", [])}
    args = [str(a) for a in c.get("args", [])]
    for a in args + [str(e.get("value", "")) for e in env.values()]:
        for ref in VAR_REF.findall(a):
            if ref not in env:
                err(cw, f"$({ref}) is not an env variable of the container (Kubernetes leaves it unexpanded)")
    opts = spaced_opts(args)
    role = check_role_opts(cw, opts, lambda n: n in env)
    if role == "all":
        return role
    for var in ("SPACE_STORE_URL", "SPACE_NODE_TOKEN"):
        ref = env.get(var, {}).get("valueFrom", {}).get("secretKeyRef")
        if not ref:
            err(cw, f"{var} must come from a Secret (secretKeyRef), not a literal")
            continue
        secret_of[(role, var)] = (ref.get("name"), ref.get("key"))
        value = secrets.get(ref.get("name"), {}).get(ref.get("key"))
        if value is None:
            continue
        if var == "SPACE_NODE_TOKEN" and len(value) < TOKEN_MIN:
            err(cw, f"{var} placeholder in {ref['name']}/{ref['key']} is shorter than {TOKEN_MIN} characters")
        if var == "SPACE_STORE_URL" and not value.startswith(PG_PREFIXES):
            err(cw, f"{var} in {ref['name']}/{ref['key']} is not a postgresql:// URL")
    if role == "node":
        if not str(opts.get("listen", "")).startswith("0.0.0.0:") and "$(NODE_IP)" not in str(opts.get("listen")):
            err(cw, "node --listen must be 0.0.0.0:PORT or $(NODE_IP):PORT (the address it advertises)")
        port = int(str(opts.get("listen", "")).rpartition(":")[2] or 0)
        if port not in {p.get("containerPort") for p in c.get("ports", [])}:
            err(cw, f"node listen port {port} is not a containerPort")
        adv = str(opts.get("advertise", ""))
        for ref, path in (("NODE_NAME", "spec.nodeName"), ("NODE_IP", "status.hostIP")):
            text = opts.get("node-id", "") if ref == "NODE_NAME" else adv
            if f"$({ref})" in str(text):
                got = env.get(ref, {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
                if got != path:
                    err(cw, f"{ref} should come from the downward API {path}, not {got}")
    return role


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
            # Only stringData values are readable here (data is base64 and may be anything).
            secrets[doc["metadata"]["name"]] = dict.fromkeys(doc.get("data", {})) | doc.get("stringData", {})
    pods = []
    for path, doc in docs:
        if doc.get("kind") in WORKLOADS:
            where = f"{os.path.basename(path)} {doc['kind']}/{doc['metadata']['name']}"
            pods.append(check_workload(where, doc, secrets))
    roles = {r for _, _, rs in pods for r in rs}
    for r in ("control", "node"):
        if r not in roles:
            err(d, f"no workload runs spaced --role={r}")
    for var in ("SPACE_STORE_URL", "SPACE_NODE_TOKEN"):
        if secret_of.get(("control", var)) != secret_of.get(("node", var)):
            err(d, f"{var} comes from different Secret keys in the control and node roles: "
                   f"{secret_of.get(('control', var))} vs {secret_of.get(('node', var))}")
    for path, doc in docs:
        if doc.get("kind") != "Service":
            continue
        where = f"{os.path.basename(path)} Service/{doc['metadata']['name']}"
        sel = doc.get("spec", {}).get("selector", {})
        targets = [ports for labels, ports, _ in pods if sel and all(labels.get(k) == v for k, v in sel.items())]
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


def parse_unit(path, unit=None):
    """systemd unit or drop-in -> {section: {key: [values]}}, merged into unit. An empty
    assignment resets the list, as systemd does (drop-ins use `ExecStart=` so)."""
    unit = unit if unit is not None else {}
    section = None
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line[0] in "#;":
                continue
            if line.startswith("[") and line.endswith("]"):
                section = unit.setdefault(line[1:-1], {})
            elif "=" in line and section is not None:
                key, _, value = line.partition("=")
                values = section.setdefault(key.strip(), [])
                if value.strip():
                    values.append(value.strip())
                else:
                    values.clear()
            else:
                err(path, f"line {n}: not a section or key=value")
    return unit


def env_file(path):
    """KEY=value lines of an example environment file."""
    env = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                key, _, value = line.partition("=")
                env[key] = value.strip('"')
    return env


def check_systemd(d):
    units = sorted(n for n in os.listdir(d) if n.endswith(".service"))
    roles = set()
    for name in units:
        base = os.path.join(d, name)
        dropins = os.path.join(d, name + ".d")
        confs = sorted(c for c in os.listdir(dropins) if c.endswith(".conf")) if os.path.isdir(dropins) else []
        # Each is a way the unit may be installed: alone, or with one of its drop-ins.
        for conf in [None] + confs:
            unit = parse_unit(base)
            if conf:
                parse_unit(os.path.join(dropins, conf), unit)
            where = name + (f" + {name}.d/{conf}" if conf else "")
            roles.add(check_unit(where, unit, d))
    for r in ("control", "node"):
        if r not in roles:
            err(d, f"no unit or drop-in runs spaced --role={r}")
    return len(units)


def check_unit(where, unit, d):
    svc = unit.get("Service", {})
    for section, key in (("Unit", "Description"), ("Service", "ExecStart"), ("Install", "WantedBy")):
        if not unit.get(section, {}).get(key):
            err(where, f"missing [{section}] {key}")
    starts = svc.get("ExecStart", [])
    if len(starts) != 1:
        err(where, f"{len(starts)} ExecStart lines (a simple service has exactly one)")
        return None
    argv = shlex.split(starts[0])
    if not argv[0].startswith("/"):
        err(where, "ExecStart must be an absolute path")
    env = dict(kv.partition("=")[::2] for v in svc.get("Environment", []) for kv in shlex.split(v))
    for f in svc.get("EnvironmentFile", []):
        example = os.path.join(d, os.path.basename(f.lstrip("-")) + ".example")
        if not os.path.exists(example):
            err(where, f"EnvironmentFile {f} has no example {os.path.relpath(example, d)}")
        else:
            env |= env_file(example)
    for ref in re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", starts[0]):
        if ref not in env:
            err(where, f"ExecStart uses ${ref}, which no Environment= or example EnvironmentFile sets")
    args = []
    for a in argv[1:]:  # systemd: $VAR alone splits into words, ${VAR} is one word
        m = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", a)
        args += env.get(m.group(1), "").split() if m else [re.sub(r"\$\{(\w+)\}", lambda v: env.get(v.group(1), ""), a)]
    opts = spaced_opts(args)
    role = check_role_opts(where, opts, lambda n: bool(env.get(n)))
    token = env.get("SPACE_NODE_TOKEN", "")
    if role != "all" and token and len(token) < TOKEN_MIN:
        err(where, f"SPACE_NODE_TOKEN in the example is shorter than {TOKEN_MIN} characters")
    if role != "all" and not env.get("SPACE_STORE_URL", "").startswith(PG_PREFIXES):
        err(where, "SPACE_STORE_URL in the example is not a postgresql:// URL")
    return role


def main():
    here = sys.argv[1] if len(sys.argv) > 1 else HERE
    n = check_kubernetes(os.path.join(here, "kubernetes"))
    check_kind(os.path.join(here, "kind", "kind-config.yaml"))
    u = check_systemd(os.path.join(here, "systemd"))
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        sys.exit(f"check-manifests: {len(errors)} problem(s)")
    print(f"check-manifests: {n} Kubernetes documents, the Kind config and {u} systemd units "
          "(with their drop-ins) are consistent")


if __name__ == "__main__":
    main()
