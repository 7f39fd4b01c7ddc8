//! Manifests as YAML streams: documents and `List`s, split into one JSON value per resource.

use serde::Deserialize;

/// A YAML stream that does not parse.
///
/// The message is the parser's own, which gives the position; callers say which text it was.
#[derive(Debug, thiserror::Error)]
#[error("{source}")]
pub struct YamlError {
    #[source]
    source: serde_norway::Error,
}

/// Parses a YAML stream (one or more `---` documents, or a `List`) into JSON values, one per
/// resource; empty documents are skipped.
pub fn yaml_documents(text: &str) -> Result<Vec<serde_json::Value>, YamlError> {
    let mut out = Vec::new();
    for doc in serde_norway::Deserializer::from_str(text) {
        let v = serde_json::Value::deserialize(doc).map_err(|source| YamlError { source })?;
        match v {
            serde_json::Value::Null => {}
            serde_json::Value::Object(ref m)
                if m.get("kind")
                    .and_then(|k| k.as_str())
                    .is_some_and(|k| k.ends_with("List")) =>
            {
                if let Some(items) = m.get("items").and_then(|i| i.as_array()) {
                    out.extend(items.iter().cloned());
                }
            }
            other => out.push(other),
        }
    }
    Ok(out)
}
