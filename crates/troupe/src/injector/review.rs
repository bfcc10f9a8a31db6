//! `admission.k8s.io/v1` `AdmissionReview`s, with no I/O: a request body
//! in, the response review out (or why the body is not a review of a pod).

use base64::Engine as _;
use serde_json::{json, Value};

use super::config::InjectorConfig;
use super::mutate::{mutate, Outcome};

const API_VERSION: &str = "admission.k8s.io/v1";

/// A body that is not a review the injector can answer: HTTP 400.
#[derive(Debug, thiserror::Error)]
pub enum MalformedReview {
    #[error("the body is not JSON ({0}); send an admission.k8s.io/v1 AdmissionReview")]
    NotJson(#[source] serde_json::Error),
    #[error("the body is not an AdmissionReview (kind {0:?}); send an admission.k8s.io/v1 AdmissionReview")]
    NotAReview(String),
    #[error("the review is {0:?}; this injector answers admission.k8s.io/v1 only: set admissionReviewVersions: [\"v1\"] in the webhook configuration")]
    Version(String),
    #[error("the review has no \"request\"; the API server sends one with every review")]
    NoRequest,
    #[error("the review's request has no \"uid\"; the response must echo it")]
    NoUid,
    #[error("the review is about a {0}, not a Pod; register the webhook for pods only (rules: resources [\"pods\"])")]
    NotAPod(String),
    #[error("the review's request has no \"object\" (the pod to create)")]
    NoObject,
}

/// What a review decided, for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    NotEnabled,
    AlreadyInjected,
    Injected,
    NotCreate,
    Refused,
}

/// One review answered.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The response `AdmissionReview`.
    pub review: Value,
    pub decision: Decision,
    /// `namespace/name` of the pod (its `generateName` when it has no name
    /// yet, as a Deployment's pods at creation), for the log.
    pub pod: String,
}

/// Answers one review.
pub fn answer(body: &[u8], config: &InjectorConfig) -> Result<Answer, MalformedReview> {
    let review: Value = serde_json::from_slice(body).map_err(MalformedReview::NotJson)?;
    let field = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_owned);
    if let Some(kind) = field(&review, "kind").filter(|k| k != "AdmissionReview") {
        return Err(MalformedReview::NotAReview(kind));
    }
    if let Some(version) = field(&review, "apiVersion").filter(|v| v != API_VERSION) {
        return Err(MalformedReview::Version(version));
    }
    let request = review.get("request").ok_or(MalformedReview::NoRequest)?;
    let uid = request
        .get("uid")
        .and_then(Value::as_str)
        .filter(|u| !u.is_empty())
        .ok_or(MalformedReview::NoUid)?;
    let object = request
        .get("object")
        .filter(|o| o.is_object())
        .ok_or(MalformedReview::NoObject)?;
    let kind = request
        .pointer("/kind/kind")
        .and_then(Value::as_str)
        .or_else(|| object.get("kind").and_then(Value::as_str))
        .unwrap_or("object of unknown kind");
    if kind != "Pod" {
        return Err(MalformedReview::NotAPod(kind.to_owned()));
    }
    // The pod exists already on an update; the sidecar is only added at
    // creation (containers of a running pod cannot change).
    let operation = request.get("operation").and_then(Value::as_str);
    let pod = format!(
        "{}/{}",
        field(request, "namespace").unwrap_or_default(),
        object
            .pointer("/metadata/name")
            .or_else(|| object.pointer("/metadata/generateName"))
            .and_then(Value::as_str)
            .unwrap_or_default()
    );
    let done = |(review, decision)| Answer {
        review,
        decision,
        pod: pod.clone(),
    };
    if operation.is_some_and(|op| op != "CREATE") {
        return Ok(done((allowed(uid, None), Decision::NotCreate)));
    }
    let response = match mutate(object, config) {
        Ok(Outcome::NotEnabled) => (allowed(uid, None), Decision::NotEnabled),
        Ok(Outcome::AlreadyInjected) => (allowed(uid, None), Decision::AlreadyInjected),
        Ok(Outcome::Patched(patch)) => (allowed(uid, Some(&patch)), Decision::Injected),
        Err(refusal) => (
            envelope(json!({
                "uid": uid,
                "allowed": false,
                "status": {
                    "status": "Failure",
                    "code": 400,
                    "reason": "BadRequest",
                    "message": refusal.to_string(),
                },
            })),
            Decision::Refused,
        ),
    };
    Ok(done(response))
}

fn allowed(uid: &str, patch: Option<&json_patch::Patch>) -> Value {
    let mut response = json!({ "uid": uid, "allowed": true });
    if let (Some(patch), Some(fields)) = (patch, response.as_object_mut()) {
        // A Patch serialises to a JSON array of operations; it cannot fail.
        let bytes = serde_json::to_vec(patch).unwrap_or_else(|_| b"[]".to_vec());
        fields.insert("patchType".into(), json!("JSONPatch"));
        fields.insert(
            "patch".into(),
            json!(base64::engine::general_purpose::STANDARD.encode(bytes)),
        );
    }
    envelope(response)
}

fn envelope(response: Value) -> Value {
    json!({
        "apiVersion": API_VERSION,
        "kind": "AdmissionReview",
        "response": response,
    })
}
