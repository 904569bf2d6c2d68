//! Hand-written schema pieces where the derived ones differ from upstream's CRD.

use schemars::{Schema, SchemaGenerator, json_schema};

/// Upstream's quantity pattern (int-or-string).
pub const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

/// Longest quantity text accepted, in bytes: the schema's `maxLength`, and what `tailor-core`'s quantity
/// parser refuses beyond.
///
/// The API server writes every pod quantity back in canonical form (a value within its int64 cap at nano
/// precision needs at most ~30 characters), and Tailor's CRD schema gives quantity strings the same
/// `maxLength`, so longer text only reaches Tailor from a client talking to it directly. Refusing it keeps
/// the work per quantity constant.
pub const MAX_QUANTITY_LEN: usize = 128;

/// A single quantity: integer or string matching [`QUANTITY_PATTERN`], at most [`MAX_QUANTITY_LEN`]
/// characters (upstream sets no length; no quantity a
/// person writes comes near it, and the API server then refuses what Tailor would refuse anyway).
pub fn quantity(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "pattern": QUANTITY_PATTERN,
        "maxLength": MAX_QUANTITY_LEN,
        "x-kubernetes-int-or-string": true,
    })
}

/// A resource list: resource name → quantity.
pub fn resource_list(generator: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": quantity(generator),
    })
}

/// Largest bucket weight a checkpoint holds (upstream's `MaxCheckpointWeight`: weights are scaled so the
/// heaviest bucket is exactly this).
pub const MAX_BUCKET_WEIGHT: u32 = 10_000;

/// Checkpoint bucket weights: bucket index (a decimal string) → weight in `0..=`[`MAX_BUCKET_WEIGHT`].
/// Upstream declares a free-form object (`x-kubernetes-preserve-unknown-fields`), so one value its decoder
/// refuses (a negative weight) is stored and only fails at restore; every value upstream writes passes this
/// schema. The map is atomic, so an apply replaces it whole and no stale key of another manager survives.
/// Keys cannot be constrained here (structural schemas have no `propertyNames`): they are checked at
/// restore, where a key that is not a bucket index skips only its own checkpoint.
pub fn bucket_weights(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": {
            "type": "integer",
            "minimum": 0,
            "maximum": MAX_BUCKET_WEIGHT,
        },
        "x-kubernetes-map-type": "atomic",
    })
}

/// Marks `targetRef` required in the VPA spec schema while the Rust field stays optional (so that
/// validation can report a missing targetRef the way upstream does).
pub fn require_target_ref(schema: &mut Schema) {
    require(schema, "targetRef");
}

/// Marks a start-up boost's `type` required while the Rust field stays optional (validation names it).
pub fn require_type(schema: &mut Schema) {
    require(schema, "type");
}

fn require(schema: &mut Schema, field: &str) {
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    let required = object
        .entry("required")
        .or_insert_with(|| serde_json::Value::Array(Vec::new()));
    if let Some(list) = required.as_array_mut()
        && !list.iter().any(|v| v == field)
    {
        list.push(serde_json::Value::String(field.into()));
    }
}
