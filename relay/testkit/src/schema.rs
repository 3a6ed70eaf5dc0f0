//! A small JSON Schema check for the tools' `outputSchema`s: the keywords schemars writes for
//! the answer types (`type`, `properties`, `required`, `additionalProperties`, `items`,
//! `enum`, `const`, `anyOf`/`oneOf`/`allOf`, `$ref` into `$defs`, `format` ignored). Every
//! structured answer the tests get through [`crate::call`] is checked against its tool's schema.

use serde_json::Value;

/// Where `value` breaks `schema`, or `Ok` when it fits.
pub fn check(schema: &Value, value: &Value) -> Result<(), String> {
    at(schema, schema, value, "$")
}

fn type_fits(name: &str, value: &Value) -> bool {
    match name {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        "integer" => value.as_i64().is_some() || value.as_u64().is_some(),
        "number" => value.is_number(),
        _ => false,
    }
}

fn at(root: &Value, schema: &Value, value: &Value, path: &str) -> Result<(), String> {
    let Some(schema) = schema.as_object() else {
        // `true` accepts anything; `false` nothing.
        return if schema == &Value::Bool(false) {
            Err(format!("{path}: no value is allowed here"))
        } else {
            Ok(())
        };
    };
    if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
        let target = reference
            .strip_prefix('#')
            .and_then(|pointer| root.pointer(pointer))
            .ok_or_else(|| format!("{path}: unresolvable $ref {reference}"))?;
        at(root, target, value, path)?;
    }
    scalar(schema, value, path)?;
    combined(root, schema, value, path)?;
    if let Value::Object(object) = value {
        properties(root, schema, object, path)?;
    }
    if let (Value::Array(items), Some(item)) = (value, schema.get("items")) {
        for (index, element) in items.iter().enumerate() {
            at(root, item, element, &format!("{path}[{index}]"))?;
        }
    }
    Ok(())
}

/// `type`, `enum` and `const`.
fn scalar(
    schema: &serde_json::Map<String, Value>,
    value: &Value,
    path: &str,
) -> Result<(), String> {
    match schema.get("type") {
        Some(Value::String(name)) if !type_fits(name, value) => {
            return Err(format!("{path}: {value} is not of type {name}"));
        }
        Some(Value::Array(names))
            if !names
                .iter()
                .filter_map(Value::as_str)
                .any(|n| type_fits(n, value)) =>
        {
            return Err(format!("{path}: {value} is none of the types {names:?}"));
        }
        _ => {}
    }
    if let Some(options) = schema.get("enum").and_then(Value::as_array)
        && !options.contains(value)
    {
        return Err(format!("{path}: {value} is not one of {options:?}"));
    }
    if let Some(constant) = schema.get("const")
        && constant != value
    {
        return Err(format!("{path}: {value} is not {constant}"));
    }
    Ok(())
}

/// `anyOf`, `oneOf` and `allOf`.
fn combined(
    root: &Value,
    schema: &serde_json::Map<String, Value>,
    value: &Value,
    path: &str,
) -> Result<(), String> {
    for (key, need) in [("anyOf", 1), ("oneOf", 1)] {
        if let Some(options) = schema.get(key).and_then(Value::as_array) {
            let fits = options
                .iter()
                .filter(|option| at(root, option, value, path).is_ok())
                .count();
            if fits < need || (key == "oneOf" && fits > 1) {
                return Err(format!("{path}: {value} fits {fits} of the {key} options"));
            }
        }
    }
    for option in schema
        .get("allOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        at(root, option, value, path)?;
    }
    Ok(())
}

/// `required`, `properties` and `additionalProperties`.
fn properties(
    root: &Value,
    schema: &serde_json::Map<String, Value>,
    object: &serde_json::Map<String, Value>,
    path: &str,
) -> Result<(), String> {
    let properties = schema.get("properties").and_then(Value::as_object);
    for name in schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = name.as_str().unwrap_or_default();
        if !object.contains_key(name) {
            return Err(format!("{path}: the required `{name}` is missing"));
        }
    }
    for (name, field) in object {
        let here = format!("{path}.{name}");
        match properties.and_then(|p| p.get(name)) {
            Some(property) => at(root, property, field, &here)?,
            None => match schema.get("additionalProperties") {
                Some(Value::Bool(false)) => {
                    return Err(format!("{here}: not in the schema"));
                }
                Some(extra) => at(root, extra, field, &here)?,
                None => {}
            },
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check;
    use serde_json::json;

    #[test]
    fn checks_what_schemars_writes() {
        let schema = json!({
            "type": "object",
            "properties": {
                "id": {"type": "string"},
                "n": {"type": ["integer", "null"]},
                "kind": {"$ref": "#/$defs/Kind"}
            },
            "required": ["id", "kind"],
            "$defs": {"Kind": {"type": "string", "enum": ["a", "b"]}}
        });
        assert!(check(&schema, &json!({"id": "x", "kind": "a", "n": null})).is_ok());
        assert!(check(&schema, &json!({"id": "x", "kind": "c"})).is_err());
        assert!(check(&schema, &json!({"kind": "a"})).is_err());
        assert!(check(&schema, &json!({"id": 1, "kind": "a"})).is_err());
        assert!(check(&schema, &json!({"id": "x", "kind": "a", "n": 1.5})).is_err());
    }
}
