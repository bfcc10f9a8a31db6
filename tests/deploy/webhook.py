"""The real `troupe injector` (the binary under test) called as the API server calls it.

`injector_for` starts it on 127.0.0.1 with a rendered release's sidecar.json and the
webhook certificate the chart rendered (checked against the MutatingWebhookConfiguration's
caBundle under the Service's DNS name, as the API server checks it; a self-signed one when
cert-manager would make it). `Injector.review` POSTs an AdmissionReview for a Pod and checks
the answer; `Injector.mutate` applies its JSON Patch with `jsonpatch`.
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import jsonpatch
from chart import NAMESPACE, Json, by_kind, secrets_of, sidecar_json
from runner import Lines

START_TIMEOUT = 60.0
CALL_TIMEOUT = 30.0


@dataclass(frozen=True)
class WebhookTls:
    """The injector's certificate and key, and what the API server trusts it by."""

    cert: bytes
    key: bytes
    ca_pem: str
    server_name: str


def self_signed(server_name: str, work: Path) -> WebhookTls:
    """A certificate for SERVER_NAME that is its own CA: for renders with no certificate
    (cert-manager issues it and its cainjector fills in the caBundle)."""
    crt, key = work / "self-signed.crt", work / "self-signed.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "1", "-subj", f"/CN={server_name}",
         "-addext", f"subjectAltName=DNS:{server_name}", "-keyout", str(key), "-out", str(crt)],
        capture_output=True, check=True,
    )  # fmt: skip
    return WebhookTls(crt.read_bytes(), key.read_bytes(), crt.read_text(), server_name)


class WebhookConnection(http.client.HTTPSConnection):
    """HTTPS to 127.0.0.1, checking the certificate for the Service's DNS name as the
    API server does (caBundle + `SERVICE.NAMESPACE.svc`)."""

    def __init__(self, port: int, context: ssl.SSLContext, server_name: str) -> None:
        super().__init__("127.0.0.1", port, context=context, timeout=CALL_TIMEOUT)
        self._server_name = server_name
        self._ctx = context

    def connect(self) -> None:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=CALL_TIMEOUT)
        self.sock = self._ctx.wrap_socket(sock, server_hostname=self._server_name)


class Injector:
    """A running `troupe injector` (stopped on leaving the `with`); `log` holds its lines."""

    def __init__(
        self, binary: str, config: str, tls: WebhookTls, work: Path, path: str = "/mutate"
    ) -> None:
        work.mkdir(parents=True, exist_ok=True)
        (work / "sidecar.json").write_text(config)
        (work / "tls.crt").write_bytes(tls.cert)
        (work / "tls.key").write_bytes(tls.key)
        self.path = path
        self.tls = tls
        self.log = Lines(
            [binary, "injector", "--listen", "127.0.0.1:0",
             "--tls-cert", str(work / "tls.crt"), "--tls-key", str(work / "tls.key"),
             "--config", str(work / "sidecar.json"), "--log-format", "json"]
        )  # fmt: skip
        try:
            line = self.log.wait(
                "the injector listening",
                lambda s: s.startswith("{") and "troupe injector listening" in s,
                START_TIMEOUT,
            )
            fields = json.loads(line).get("fields", {})
            self.port = int(str(fields["addr"]).rsplit(":", 1)[1])
            self.context = ssl.create_default_context(cadata=tls.ca_pem)
            status, body = self.call("GET", "/healthz")
            assert status == 200, f"injector /healthz answered {status}: {body!r}"
        except BaseException:
            self.log.stop()
            raise

    def __enter__(self) -> Injector:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.log.stop()

    def call(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        conn = WebhookConnection(self.port, self.context, self.tls.server_name)
        try:
            headers = {"Content-Type": "application/json"} if body else {}
            conn.request(method, path, body=body, headers=headers)
            answer = conn.getresponse()
            return answer.status, answer.read()
        finally:
            conn.close()

    def review(self, pod: Json) -> Json:
        """The injector's answer to the API server's review of creating POD: allowed, for
        this request (its uid)."""
        uid = str(uuid.uuid4())
        review = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": uid,
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
                "requestResource": {"group": "", "version": "v1", "resource": "pods"},
                "name": pod["metadata"]["name"],
                "namespace": NAMESPACE,
                "operation": "CREATE",
                "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
                "object": pod,
                "oldObject": None,
                "dryRun": False,
                "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
            },
        }
        status, body = self.call("POST", self.path, json.dumps(review).encode())
        assert status == 200, f"the injector answered {status}: {body!r}"
        response: Json = json.loads(body)["response"]
        assert response["uid"] == uid, response
        assert response["allowed"] is True, response
        return response

    def mutate(self, pod: Json) -> Json:
        """POD as the API server stores it after this webhook: the JSON Patch applied."""
        response = self.review(pod)
        assert response.get("patchType") == "JSONPatch", response
        return applied(pod, response)


def applied(pod: Json, response: Json) -> Json:
    """POD with the review's patch applied (unchanged when the injector sent none)."""
    if "patch" not in response:
        return pod
    patch = json.loads(base64.b64decode(response["patch"]))
    patched: Json = jsonpatch.apply_patch(pod, patch)
    return patched


def injector_for(binary: str, docs: list[Json], work: Path) -> Injector:
    """The injector as a release of DOCS runs it: its sidecar.json, its certificate (or a
    self-signed one where cert-manager would issue it), the webhook's path."""
    config = sidecar_json(docs)
    assert config is not None, "the release renders no sidecar.json"
    hooks = by_kind(docs, "MutatingWebhookConfiguration")
    assert hooks, "the release renders no MutatingWebhookConfiguration"
    webhook = hooks[0]["webhooks"][0]
    service = webhook["clientConfig"]["service"]
    server_name = f"{service['name']}.{service['namespace']}.svc"
    secret = secrets_of(docs).get(f"{service['name']}-tls")
    ca_bundle = webhook["clientConfig"].get("caBundle")
    if secret is None or ca_bundle is None:
        work.mkdir(parents=True, exist_ok=True)
        tls = self_signed(server_name, work)
    else:
        ca_pem = base64.b64decode(ca_bundle).decode()
        tls = WebhookTls(secret["tls.crt"], secret["tls.key"], ca_pem, server_name)
    return Injector(binary, config, tls, work, service.get("path", "/mutate"))
