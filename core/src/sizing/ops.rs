//! JSON Patch operations on pods, shared by the webhook's admission patch and the updater's resize and
//! annotation patches.

use json_patch::{AddOperation, PatchOperation, RemoveOperation};
use serde_json::Value;

/// Escapes one JSON-pointer segment (`~` → `~0`, `/` → `~1`).
pub fn escape(segment: &str) -> String {
    if !segment.contains(['~', '/']) {
        return segment.to_owned();
    }
    segment.replace('~', "~0").replace('/', "~1")
}

fn pointer(path: &str) -> json_patch::jsonptr::PointerBuf {
    // Paths built here are always valid pointers; fall back to the root on the impossible error.
    json_patch::jsonptr::PointerBuf::parse(path).unwrap_or_default()
}

/// An `add` operation.
pub fn add_op(path: &str, value: Value) -> PatchOperation {
    PatchOperation::Add(AddOperation {
        path: pointer(path),
        value,
    })
}

/// A `remove` operation (the path must exist in the object patched).
pub fn remove_op(path: &str) -> PatchOperation {
    PatchOperation::Remove(RemoveOperation {
        path: pointer(path),
    })
}

/// Path of an annotation.
fn annotation_path(key: &str) -> String {
    format!("/metadata/annotations/{}", escape(key))
}

/// `add /metadata/annotations/<name> "<value>"`.
pub fn add_annotation_op(name: &str, value: &str) -> PatchOperation {
    add_op(&annotation_path(name), Value::String(value.to_owned()))
}

/// `remove /metadata/annotations/<name>`: the updater's un-boost removes the boost annotations the webhook
/// wrote.
pub fn remove_annotation_op(name: &str) -> PatchOperation {
    remove_op(&annotation_path(name))
}
