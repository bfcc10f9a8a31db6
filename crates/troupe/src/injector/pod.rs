//! Small edits of Kubernetes objects kept as JSON: a container's env,
//! ports, mounts and resources, a pod's lists. Anything these do not touch
//! stays as it was, unknown fields included.

use serde_json::{json, Map, Value};

/// `obj[key]` as an array, created empty when absent (or not an array).
pub fn list<'a>(obj: &'a mut Map<String, Value>, key: &str) -> &'a mut Vec<Value> {
    let slot = obj
        .entry(key.to_owned())
        .or_insert_with(|| Value::Array(Vec::new()));
    if !slot.is_array() {
        *slot = Value::Array(Vec::new());
    }
    match slot {
        Value::Array(items) => items,
        // Made an array just above.
        _ => unreachable!("slot was just made an array"),
    }
}

/// `obj[key]` as an object, created empty when absent (or not an object).
pub fn object<'a>(obj: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let slot = obj
        .entry(key.to_owned())
        .or_insert_with(|| Value::Object(Map::new()));
    if !slot.is_object() {
        *slot = Value::Object(Map::new());
    }
    match slot {
        Value::Object(map) => map,
        _ => unreachable!("slot was just made an object"),
    }
}

/// Whether a list of named objects has one called `name`.
pub fn has_named(items: &[Value], name: &str) -> bool {
    items
        .iter()
        .any(|i| i.get("name").and_then(Value::as_str) == Some(name))
}

/// Sets env var `name` on a container, replacing any entry of that name.
pub fn set_env(container: &mut Map<String, Value>, var: Value) {
    let Some(name) = var.get("name").and_then(Value::as_str).map(str::to_owned) else {
        return;
    };
    let env = list(container, "env");
    env.retain(|e| e.get("name").and_then(Value::as_str) != Some(name.as_str()));
    env.push(var);
}

/// `name=value` as an EnvVar.
pub fn env_value(name: &str, value: &str) -> Value {
    json!({ "name": name, "value": value })
}

/// Removes env var `name` from a container.
pub fn remove_env(container: &mut Map<String, Value>, name: &str) {
    if let Some(Value::Array(env)) = container.get_mut("env") {
        env.retain(|e| e.get("name").and_then(Value::as_str) != Some(name));
    }
}

/// The value of env var `name`, if set as a plain value.
pub fn env_of<'a>(container: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    container
        .get("env")?
        .as_array()?
        .iter()
        .find(|e| e.get("name").and_then(Value::as_str) == Some(name))
}

/// Sets the container port called `name`, replacing one of that name.
pub fn set_port(container: &mut Map<String, Value>, name: &str, port: u16) {
    remove_port(container, name);
    list(container, "ports").push(json!({
        "name": name,
        "containerPort": port,
        "protocol": "TCP",
    }));
}

/// Removes the container port called `name`.
pub fn remove_port(container: &mut Map<String, Value>, name: &str) {
    if let Some(Value::Array(ports)) = container.get_mut("ports") {
        ports.retain(|p| p.get("name").and_then(Value::as_str) != Some(name));
    }
}

/// Adds `vars` a container does not set itself (its own value wins).
pub fn add_missing_env(container: &mut Map<String, Value>, vars: &[Map<String, Value>]) {
    if vars.is_empty() {
        return;
    }
    let env = list(container, "env");
    for var in vars {
        let name = var.get("name").and_then(Value::as_str).unwrap_or_default();
        if !has_named(env, name) {
            env.push(Value::Object(var.clone()));
        }
    }
}

/// Adds `mounts` at paths where the container mounts nothing yet (two
/// mounts at one path make the pod invalid).
pub fn add_missing_mounts(container: &mut Map<String, Value>, mounts: &[Map<String, Value>]) {
    if mounts.is_empty() {
        return;
    }
    let existing = list(container, "volumeMounts");
    for mount in mounts {
        let path = mount.get("mountPath");
        if !existing.iter().any(|m| m.get("mountPath") == path) {
            existing.push(Value::Object(mount.clone()));
        }
    }
}
