//! The grammar of the annotations' values: Kubernetes quantities, Secret
//! names and keys, log filters, booleans. Each check gives the
//! [`AnnotationError`] that names the annotation, the value and the fix.

use super::annotations::{AnnotationError, STORE_SECRET, STORE_SECRET_KEY};

pub fn boolean(annotation: &'static str, v: &str) -> Result<bool, AnnotationError> {
    match v {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(AnnotationError::NotABool {
            annotation,
            value: v.into(),
        }),
    }
}

/// A filter the daemon's log accepts (it parses `RUST_LOG` the same way).
pub fn log_level(v: &str) -> Result<String, AnnotationError> {
    let bad = |reason: String| AnnotationError::BadLogLevel {
        value: v.into(),
        reason,
    };
    if v.is_empty() {
        return Err(bad("it is empty".into()));
    }
    tracing_subscriber::EnvFilter::builder()
        .parse(v)
        .map_err(|e| bad(e.to_string()))?;
    Ok(v.to_owned())
}

pub fn cpu(annotation: &'static str, v: &str) -> Result<String, AnnotationError> {
    quantity(annotation, v, "e.g. \"250m\" (a quarter CPU) or \"2\"")
}

pub fn memory(annotation: &'static str, v: &str) -> Result<String, AnnotationError> {
    quantity(annotation, v, "e.g. \"128Mi\" or \"1Gi\"")
}

/// A non-negative Kubernetes quantity: a decimal number and a suffix
/// (`Ki`..`Ei`, `m`, `k`, `M`..`E`, or an exponent `e3`/`E-2`).
fn quantity(
    annotation: &'static str,
    v: &str,
    example: &'static str,
) -> Result<String, AnnotationError> {
    if is_quantity(v) {
        Ok(v.to_owned())
    } else {
        Err(AnnotationError::NotAQuantity {
            annotation,
            value: v.into(),
            example,
        })
    }
}

fn is_quantity(v: &str) -> bool {
    let v = v.strip_prefix('+').unwrap_or(v);
    let digits_end = v
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(v.len());
    let (number, suffix) = v.split_at(digits_end);
    let number_ok = !number.is_empty()
        && number.matches('.').count() <= 1
        && number.chars().any(|c| c.is_ascii_digit());
    let suffix_ok = match suffix {
        "" | "m" | "k" | "M" | "G" | "T" | "P" | "E" => true,
        "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" => true,
        exp => exp
            .strip_prefix(['e', 'E'])
            .map(|n| n.strip_prefix(['+', '-']).unwrap_or(n))
            .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit())),
    };
    number_ok && suffix_ok
}

/// A Secret's name: a DNS subdomain (RFC 1123), as Kubernetes requires.
pub fn secret_name(v: &str) -> Result<String, AnnotationError> {
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if v.len() <= 253 && v.split('.').all(label_ok) {
        Ok(v.to_owned())
    } else {
        Err(AnnotationError::BadSecretName {
            annotation: STORE_SECRET,
            value: v.into(),
            what: "name",
            rule: "lowercase letters, digits, '-' and '.', e.g. \"orders-db\"",
        })
    }
}

/// A key in a Secret's data.
pub fn secret_key(v: &str) -> Result<String, AnnotationError> {
    let ok = !v.is_empty()
        && v.len() <= 253
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(v.to_owned())
    } else {
        Err(AnnotationError::BadSecretName {
            annotation: STORE_SECRET_KEY,
            value: v.into(),
            what: "key",
            rule: "letters, digits, '-', '_' and '.', e.g. \"url\"",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_follow_kubernetes_grammar() {
        for good in [
            "1", "250m", "0.5", "1.5Gi", "128Mi", "2k", "1e3", "1E-2", ".5", "+1",
        ] {
            assert!(is_quantity(good), "{good}");
        }
        for bad in ["", "abc", "1.2.3", "-1", "1Gb", "Mi", "1 Gi", "1e", "1ki"] {
            assert!(!is_quantity(bad), "{bad}");
        }
    }
}
