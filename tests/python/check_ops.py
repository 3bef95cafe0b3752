"""Checks the deployment files of ops/ offline.

    check_ops.py kubernetes OPS_DIR       # every manifest against the Kubernetes schemas
    check_ops.py proxy-configs OPS_DIR OUT_DIR   # writes each ConfigMap's proxy.toml to OUT_DIR

`kubernetes` validates each document of ops/kubernetes/*.yaml with kubernetes-validate (the
schemas of the newest Kubernetes release it knows, strict: unknown fields are errors) and
checks what a schema cannot: every container runs as non-root with a read-only root file
system, and every atdp-proxy container has liveness and readiness probes on the admin port.
Prints one JSON line: the version, and the kinds checked per file. Exits 1 with the problems.
"""

import json
import pathlib
import sys

import kubernetes_validate
import yaml


def documents(ops: pathlib.Path):
    for path in sorted((ops / "kubernetes").glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document:
                yield path.name, document


def pod_spec(document: dict):
    spec = document.get("spec", {})
    return spec.get("template", {}).get("spec") if "template" in spec else None


def kubernetes(ops: pathlib.Path) -> int:
    version = kubernetes_validate.latest_version()
    problems: list[str] = []
    kinds: dict[str, list[str]] = {}
    for name, document in documents(ops):
        kind = document.get("kind", "?")
        kinds.setdefault(name, []).append(kind)
        try:
            kubernetes_validate.validate(document, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            problems.append(f"{name} {kind}: {error.message} at {list(error.path)}")
        spec = pod_spec(document)
        if spec is None:
            continue
        pod_security = spec.get("securityContext", {})
        if not pod_security.get("runAsNonRoot"):
            problems.append(f"{name} {kind}: the pod may run as root")
        for container in spec.get("containers", []):
            security = container.get("securityContext", {})
            if not security.get("readOnlyRootFilesystem"):
                problems.append(f"{name} {container['name']}: root file system writable")
            if security.get("allowPrivilegeEscalation", True):
                problems.append(f"{name} {container['name']}: privilege escalation allowed")
            if container["name"] == "atdp-proxy":
                for probe in ("livenessProbe", "readinessProbe"):
                    port = container.get(probe, {}).get("httpGet", {}).get("port")
                    if port != "admin":
                        problems.append(f"{name}: atdp-proxy has no {probe} on the admin port")
        if spec.get("terminationGracePeriodSeconds", 30) < 45:
            problems.append(f"{name} {kind}: too short a grace period to drain (30 s) and flush")
    print(json.dumps({"version": version, "kinds": kinds, "problems": problems}))
    return 1 if problems else 0


def proxy_configs(ops: pathlib.Path, out: pathlib.Path) -> int:
    written = []
    for name, document in documents(ops):
        text = document.get("data", {}).get("proxy.toml") if document.get("kind") == "ConfigMap" else None
        if text is not None:
            target = out / f"{pathlib.Path(name).stem}.toml"
            target.write_text(text)
            written.append(str(target))
    print(json.dumps({"written": written}))
    return 0


if __name__ == "__main__":
    mode, ops_dir = sys.argv[1], pathlib.Path(sys.argv[2])
    if mode == "kubernetes":
        sys.exit(kubernetes(ops_dir))
    sys.exit(proxy_configs(ops_dir, pathlib.Path(sys.argv[3])))
