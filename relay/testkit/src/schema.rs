//! A small JSON Schema check for the tools' `outputSchema`s: the keywords schemars writes for
//! the answer types (`type`, `properties`, `required`, `additionalProperties`, `items`,
//! `enum`, `const`, `anyOf`/`oneOf`/`allOf`, `$ref` into `$defs`, `format` ignored). Every
//! structured answer the tests get through [`crate::call`] is checked against its tool's schema.

use serde_json::Value;

/// Where a value breaks a schema, and how.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{path}: {problem}")]
pub struct Mismatch {
    /// The place in the value: `$`, `$.items[2].id`.
    pub path: String,
    /// What is wrong there (boxed: it may hold the values it names).
    pub problem: Box<Problem>,
}

/// How a value breaks a schema.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Problem {
    /// The schema is `false`.
    #[error("no value is allowed here")]
    Forbidden,
    /// A `$ref` that points nowhere in the schema.
    #[error("unresolvable $ref {0}")]
    UnresolvableRef(String),
    /// Not of the one `type`.
    #[error("{value} is not of type {expected}")]
    Type {
        /// The value.
        value: Value,
        /// The type.
        expected: String,
    },
    /// Of none of the `type`s.
    #[error("{value} is none of the types {expected:?}")]
    Types {
        /// The value.
        value: Value,
        /// The types.
        expected: Vec<Value>,
    },
    /// Not one of the `enum`.
    #[error("{value} is not one of {options:?}")]
    NotInEnum {
        /// The value.
        value: Value,
        /// The options.
        options: Vec<Value>,
    },
    /// Not the `const`.
    #[error("{value} is not {constant}")]
    NotConst {
        /// The value.
        value: Value,
        /// The constant.
        constant: Value,
    },
    /// Fits too few (or, for `oneOf`, too many) of the `anyOf`/`oneOf` options.
    #[error("{value} fits {fits} of the {keyword} options")]
    Options {
        /// The value.
        value: Value,
        /// How many it fits.
        fits: usize,
        /// `anyOf` or `oneOf`.
        keyword: &'static str,
    },
    /// A `required` property is missing.
    #[error("the required `{0}` is missing")]
    MissingRequired(String),
    /// A property the schema does not have, where `additionalProperties` is `false`.
    #[error("not in the schema")]
    NotInSchema,
}

/// `Err` of `problem` at `path`.
fn fail(path: &str, problem: Problem) -> Result<(), Mismatch> {
    Err(Mismatch {
        path: path.to_owned(),
        problem: Box::new(problem),
    })
}

/// Where `value` breaks `schema`, or `Ok` when it fits.
pub fn check(schema: &Value, value: &Value) -> Result<(), Mismatch> {
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

fn at(root: &Value, schema: &Value, value: &Value, path: &str) -> Result<(), Mismatch> {
    let Some(schema) = schema.as_object() else {
        // `true` accepts anything; `false` nothing.
        return if schema == &Value::Bool(false) {
            fail(path, Problem::Forbidden)
        } else {
            Ok(())
        };
    };
    if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
        let target = reference
            .strip_prefix('#')
            .and_then(|pointer| root.pointer(pointer));
        match target {
            Some(target) => at(root, target, value, path)?,
            None => fail(path, Problem::UnresolvableRef(reference.to_owned()))?,
        }
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
) -> Result<(), Mismatch> {
    match schema.get("type") {
        Some(Value::String(name)) if !type_fits(name, value) => {
            return fail(
                path,
                Problem::Type {
                    value: value.clone(),
                    expected: name.clone(),
                },
            );
        }
        Some(Value::Array(names))
            if !names
                .iter()
                .filter_map(Value::as_str)
                .any(|n| type_fits(n, value)) =>
        {
            return fail(
                path,
                Problem::Types {
                    value: value.clone(),
                    expected: names.clone(),
                },
            );
        }
        _ => {}
    }
    if let Some(options) = schema.get("enum").and_then(Value::as_array)
        && !options.contains(value)
    {
        return fail(
            path,
            Problem::NotInEnum {
                value: value.clone(),
                options: options.clone(),
            },
        );
    }
    if let Some(constant) = schema.get("const")
        && constant != value
    {
        return fail(
            path,
            Problem::NotConst {
                value: value.clone(),
                constant: constant.clone(),
            },
        );
    }
    Ok(())
}

/// `anyOf`, `oneOf` and `allOf`.
fn combined(
    root: &Value,
    schema: &serde_json::Map<String, Value>,
    value: &Value,
    path: &str,
) -> Result<(), Mismatch> {
    for (keyword, need) in [("anyOf", 1), ("oneOf", 1)] {
        if let Some(options) = schema.get(keyword).and_then(Value::as_array) {
            let fits = options
                .iter()
                .filter(|option| at(root, option, value, path).is_ok())
                .count();
            if fits < need || (keyword == "oneOf" && fits > 1) {
                return fail(
                    path,
                    Problem::Options {
                        value: value.clone(),
                        fits,
                        keyword,
                    },
                );
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
) -> Result<(), Mismatch> {
    let properties = schema.get("properties").and_then(Value::as_object);
    for name in schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = name.as_str().unwrap_or_default();
        if !object.contains_key(name) {
            return fail(path, Problem::MissingRequired(name.to_owned()));
        }
    }
    for (name, field) in object {
        let here = format!("{path}.{name}");
        match properties.and_then(|p| p.get(name)) {
            Some(property) => at(root, property, field, &here)?,
            None => match schema.get("additionalProperties") {
                Some(Value::Bool(false)) => {
                    return fail(&here, Problem::NotInSchema);
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
        let missing = check(&schema, &json!({"kind": "a"})).expect_err("id is required");
        assert_eq!(missing.to_string(), "$: the required `id` is missing");
        assert!(check(&schema, &json!({"id": 1, "kind": "a"})).is_err());
        assert!(check(&schema, &json!({"id": "x", "kind": "a", "n": 1.5})).is_err());
    }
}
