"""What Kubernetes' controllers make of the chart's workloads, without a cluster: the Pods of
a StatefulSet (names, hostnames, claims) and the Pod a Deployment's ReplicaSet creates
(what the injector's webhook is asked about)."""

from __future__ import annotations

import copy

from chart import NAMESPACE, Json


def statefulset_pods(sts: Json) -> list[Json]:
    """The Pods the StatefulSet controller would create: NAME-N, hostname NAME-N and
    subdomain the headless Service (its DNS name), a claim per volumeClaimTemplate."""
    name = sts["metadata"]["name"]
    template = sts["spec"]["template"]
    pods = []
    for i in range(int(sts["spec"]["replicas"])):
        pod_name = f"{name}-{i}"
        spec = copy.deepcopy(template["spec"])
        spec["hostname"] = pod_name
        spec["subdomain"] = sts["spec"]["serviceName"]
        spec.setdefault("volumes", []).extend(
            {
                "name": claim["metadata"]["name"],
                "persistentVolumeClaim": {"claimName": f"{claim['metadata']['name']}-{pod_name}"},
            }
            for claim in sts["spec"].get("volumeClaimTemplates", [])
        )
        labels = {
            **template["metadata"].get("labels", {}),
            "statefulset.kubernetes.io/pod-name": pod_name,
            "apps.kubernetes.io/pod-index": str(i),
        }
        meta: Json = {"name": pod_name, "namespace": NAMESPACE, "labels": labels}
        if template["metadata"].get("annotations"):
            meta["annotations"] = template["metadata"]["annotations"]
        pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
    return pods


def stable_name(pod: Json) -> str:
    """A StatefulSet pod's DNS name: HOSTNAME.SUBDOMAIN.NAMESPACE.svc.DOMAIN."""
    spec = pod["spec"]
    return f"{spec['hostname']}.{spec['subdomain']}.{NAMESPACE}.svc.cluster.local"


def deployment_pod(deployment: Json, name: str) -> Json:
    """The Pod a ReplicaSet of the Deployment would create (what the webhook sees)."""
    template = copy.deepcopy(deployment["spec"]["template"])
    meta: Json = {
        "name": name,
        "generateName": f"{deployment['metadata']['name']}-",
        "namespace": NAMESPACE,
        **template["metadata"],
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template["spec"]}


def with_pod(deployment: Json, pod: Json) -> Json:
    """DEPLOYMENT with POD (as admitted) for its template: what validating and scanning a
    Deployment checks of the pods it makes. Only the metadata a template may carry."""
    out = copy.deepcopy(deployment)
    meta = {k: v for k, v in pod["metadata"].items() if k in ("labels", "annotations")}
    out["spec"]["template"] = {"metadata": meta, "spec": copy.deepcopy(pod["spec"])}
    return out
