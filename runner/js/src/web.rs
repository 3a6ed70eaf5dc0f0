//! The natives under `web.js`'s URL, URLSearchParams, TextEncoder, TextDecoder, atob and btoa:
//! the `url` crate (the WHATWG URL standard, with its setters in `url::quirks`, brought to the
//! standard where it departs from it in [`crate::web_url`], and its
//! application/x-www-form-urlencoded in `form_urlencoded`), std's UTF-8 and the `base64` crate.
//! `web.js` keeps the JS-facing shapes: the classes, argument conversion and the errors' types.
//!
//! Each function is pure computation over its arguments (no host call), so both engines give
//! the same answers. A parsed URL lives in an opaque object ([`UrlRecord`]) that only web.js
//! holds, in a private field.

use crate::web_url::Record;
use base64::Engine as _;
use boa_engine::object::ObjectInitializer;
use boa_engine::object::builtins::{JsArray, JsArrayBuffer, JsTypedArray, JsUint8Array};
use boa_engine::{
    Context, Finalize, JsData, JsNativeError, JsObject, JsResult, JsString, JsValue,
    NativeFunction, Trace, js_string,
};

type Native = fn(&JsValue, &[JsValue], &mut Context) -> JsResult<JsValue>;

/// The natives object web.js runs with (its `native`).
pub(crate) fn natives(context: &mut Context) -> JsObject {
    let functions: [(Native, &str, usize); 10] = [
        (utf8_encode, "utf8Encode", 1),
        (utf8_encode_into, "utf8EncodeInto", 2),
        (utf8_decode, "utf8Decode", 4),
        (base64_encode, "base64Encode", 1),
        (base64_decode, "base64Decode", 1),
        (url_parse, "urlParse", 2),
        (url_part, "urlPart", 2),
        (url_set, "urlSet", 3),
        (form_parse, "formParse", 1),
        (form_serialize, "formSerialize", 1),
    ];
    let mut natives = ObjectInitializer::new(context);
    for (function, name, length) in functions {
        natives.function(
            NativeFunction::from_fn_ptr(function),
            JsString::from(name),
            length,
        );
    }
    natives.build()
}

fn arg(args: &[JsValue], index: usize) -> JsValue {
    args.get(index).cloned().unwrap_or_default()
}

/// `args[index]` as a Rust string; lone surrogates become U+FFFD (a USVString, as WebIDL
/// converts them).
fn usv_arg(args: &[JsValue], index: usize, context: &mut Context) -> JsResult<String> {
    Ok(arg(args, index).to_string(context)?.to_std_string_lossy())
}

fn type_error(message: &str) -> boa_engine::JsError {
    JsNativeError::typ().with_message(message.to_owned()).into()
}

/// The buffer, byte offset and byte length of the Uint8Array `value` (web.js makes one over
/// any buffer source).
fn view_of(value: &JsValue, context: &mut Context) -> JsResult<(JsArrayBuffer, usize, usize)> {
    let object = value
        .as_object()
        .ok_or_else(|| type_error("expected a Uint8Array"))?;
    let view = JsTypedArray::from_object(object.clone())?;
    let buffer = view
        .buffer(context)?
        .as_object()
        .ok_or_else(|| type_error("the typed array has no buffer"))?;
    let buffer = JsArrayBuffer::from_object(buffer)
        .map_err(|_| type_error("the data must be in an ArrayBuffer, not a SharedArrayBuffer"))?;
    let offset = view.byte_offset(context)?;
    let length = view.byte_length(context)?;
    Ok((buffer, offset, length))
}

/// A copy of the bytes the Uint8Array `value` sees.
fn bytes_of(value: &JsValue, context: &mut Context) -> JsResult<Vec<u8>> {
    let (buffer, offset, length) = view_of(value, context)?;
    let data = buffer
        .data()
        .ok_or_else(|| type_error("the ArrayBuffer is detached"))?;
    data.get(offset..offset + length)
        .map(<[u8]>::to_vec)
        .ok_or_else(|| type_error("the typed array is out of its buffer's bounds"))
}

fn uint8_array(bytes: Vec<u8>, context: &mut Context) -> JsResult<JsValue> {
    Ok(JsUint8Array::from_iter(bytes, context)?.into())
}

/// `TextEncoder.encode`: the UTF-8 bytes of `args[0]` (a lone surrogate is written as U+FFFD).
fn utf8_encode(_: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let text = usv_arg(args, 0, context)?;
    uint8_array(text.into_bytes(), context)
}

/// `TextEncoder.encodeInto`: writes the whole characters of `args[0]` that fit into the
/// Uint8Array `args[1]`; answers `[UTF-16 units read, bytes written]`.
fn utf8_encode_into(_: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let text = arg(args, 0).to_string(context)?;
    let (buffer, offset, length) = view_of(&arg(args, 1), context)?;
    let mut data = buffer
        .data_mut()
        .ok_or_else(|| type_error("the ArrayBuffer is detached"))?;
    let out = data
        .get_mut(offset..offset + length)
        .ok_or_else(|| type_error("the typed array is out of its buffer's bounds"))?;
    let (mut read, mut written) = (0usize, 0usize);
    for c in char::decode_utf16(text.iter()) {
        let c = c.unwrap_or(char::REPLACEMENT_CHARACTER);
        let size = c.len_utf8();
        let Some(slot) = out.get_mut(written..written + size) else {
            break;
        };
        c.encode_utf8(slot);
        written += size;
        // A lone surrogate, replaced, was one unit.
        read += if c == char::REPLACEMENT_CHARACTER {
            1
        } else {
            c.len_utf16()
        };
    }
    drop(data);
    Ok(JsArray::from_iter([JsValue::from(read), JsValue::from(written)], context).into())
}

/// `TextDecoder.decode`'s step: decodes the bytes held back from the last call (`args[0]`,
/// a Uint8Array or null) followed by `args[1]`. With `args[2]` (stream) an incomplete character
/// at the end is held back; with `args[3]` (fatal) invalid data answers null. Answers
/// `[text, bytes held back or null]`; invalid sequences become U+FFFD as the Encoding standard
/// says (one per maximal invalid subpart, as std's lossy decoding does).
fn utf8_decode(_: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let mut bytes = match arg(args, 0) {
        held if held.is_null_or_undefined() => Vec::new(),
        held => bytes_of(&held, context)?,
    };
    bytes.extend(bytes_of(&arg(args, 1), context)?);
    let stream = arg(args, 2).to_boolean();
    let fatal = arg(args, 3).to_boolean();
    let Some((text, held)) = decode_utf8(&bytes, stream, fatal) else {
        return Ok(JsValue::null());
    };
    let held = if held.is_empty() {
        JsValue::null()
    } else {
        uint8_array(held.to_vec(), context)?
    };
    Ok(JsArray::from_iter([JsString::from(text.as_str()).into(), held], context).into())
}

/// The text of `bytes` and the incomplete character held back at its end (only when
/// `stream`), or None when `fatal` and the bytes are not valid UTF-8.
pub(crate) fn decode_utf8(bytes: &[u8], stream: bool, fatal: bool) -> Option<(String, &[u8])> {
    let mut text = String::with_capacity(bytes.len());
    let mut rest = bytes;
    loop {
        match std::str::from_utf8(rest) {
            Ok(valid) => {
                text.push_str(valid);
                return Some((text, &[]));
            }
            Err(error) => {
                let (valid, after) = rest.split_at(error.valid_up_to());
                // Checked: the bytes up to valid_up_to are UTF-8.
                text.push_str(std::str::from_utf8(valid).ok()?);
                match error.error_len() {
                    // An incomplete character at the end: the next call may complete it.
                    None if stream => return Some((text, after)),
                    _ if fatal => return None,
                    None => {
                        text.push(char::REPLACEMENT_CHARACTER);
                        return Some((text, &[]));
                    }
                    Some(invalid) => {
                        text.push(char::REPLACEMENT_CHARACTER);
                        rest = &after[invalid..];
                    }
                }
            }
        }
    }
}

/// `btoa`: the base64 of `args[0]`'s code units as bytes, or null when one is above U+00FF.
fn base64_encode(_: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let text = arg(args, 0).to_string(context)?;
    let bytes: Option<Vec<u8>> = text.iter().map(|unit| u8::try_from(unit).ok()).collect();
    Ok(match bytes {
        Some(bytes) => js_string!(base64::engine::general_purpose::STANDARD.encode(bytes)).into(),
        None => JsValue::null(),
    })
}

/// `atob`: the bytes of the forgiving-base64 text `args[0]`, one code unit each, or null when
/// the text is not base64.
fn base64_decode(_: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let text = arg(args, 0).to_string(context)?;
    let units: Vec<u16> = text.iter().collect();
    Ok(match forgiving_base64(&units) {
        Some(bytes) => JsString::from(
            bytes
                .into_iter()
                .map(u16::from)
                .collect::<Vec<_>>()
                .as_slice(),
        )
        .into(),
        None => JsValue::null(),
    })
}

/// The HTML standard's forgiving-base64 decode: ASCII whitespace is skipped, up to two `=` may
/// end a text whose length is a multiple of four, bits left over at the end are dropped.
pub(crate) fn forgiving_base64(units: &[u16]) -> Option<Vec<u8>> {
    let mut data: Vec<u8> = Vec::with_capacity(units.len());
    for &unit in units {
        match unit {
            0x09 | 0x0a | 0x0c | 0x0d | 0x20 => {}
            _ => data.push(u8::try_from(unit).ok().filter(u8::is_ascii)?),
        }
    }
    if data.len().is_multiple_of(4) {
        for _ in 0..2 {
            if data.last() == Some(&b'=') {
                data.pop();
            }
        }
    }
    if data.len() % 4 == 1 {
        return None;
    }
    let engine = base64::engine::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_allow_trailing_bits(true)
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::RequireNone),
    );
    engine.decode(&data).ok()
}

/// A parsed URL ([`crate::web_url`]), held by web.js's `URL` in a private field.
#[derive(Trace, Finalize, JsData)]
#[boa_gc(unsafe_empty_trace)]
struct UrlRecord(Record);

/// `new URL(args[0], args[1])`: the parsed URL's record, or null when the input (or the base,
/// if given and not undefined) is not a valid URL.
fn url_parse(_: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let input = usv_arg(args, 0, context)?;
    let base = match arg(args, 1) {
        base if base.is_undefined() => None,
        _ => Some(usv_arg(args, 1, context)?),
    };
    Ok(match Record::parse(&input, base.as_deref()) {
        Some(record) => JsObject::from_proto_and_data(None, UrlRecord(record)).into(),
        None => JsValue::null(),
    })
}

fn record_of(value: &JsValue) -> JsResult<JsObject> {
    value
        .as_object()
        .filter(|object| object.downcast_ref::<UrlRecord>().is_some())
        .ok_or_else(|| type_error("not a URL record"))
}

/// The attribute `args[1]` of the URL record `args[0]` (href, protocol, username, password,
/// host, hostname, port, pathname, search, hash; 10 is the origin, 11 the query without its
/// `?`, for URLSearchParams).
fn url_part(_: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let record = record_of(&arg(args, 0))?;
    let index = arg(args, 1).to_index(context)?;
    let record = record
        .downcast_ref::<UrlRecord>()
        .ok_or_else(|| type_error("not a URL record"))?;
    let text = usize::try_from(index)
        .ok()
        .and_then(|index| record.0.part(index))
        .ok_or_else(|| type_error("no such URL attribute"))?;
    Ok(JsString::from(text.as_str()).into())
}

/// Sets the attribute `args[1]` of the URL record `args[0]` to `args[2]`, as the URL standard's
/// setters do (a value they cannot use is ignored); 11 sets the query itself (URLSearchParams'
/// update, "" for none). Answers false only when the href setter's value is not a valid URL.
fn url_set(_: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let record = record_of(&arg(args, 0))?;
    let index = arg(args, 1).to_index(context)?;
    let value = usv_arg(args, 2, context)?;
    let mut record = record
        .downcast_mut::<UrlRecord>()
        .ok_or_else(|| type_error("not a URL record"))?;
    let set = usize::try_from(index)
        .ok()
        .and_then(|index| record.0.set(index, &value))
        .ok_or_else(|| type_error("no such URL attribute"))?;
    Ok(set.into())
}

/// application/x-www-form-urlencoded parsing of `args[0]`: a list of `[name, value]` pairs.
fn form_parse(_: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let text = usv_arg(args, 0, context)?;
    let pairs: Vec<JsValue> = url::form_urlencoded::parse(text.as_bytes())
        .map(|(name, value)| {
            let pair = [
                JsString::from(name.as_ref()).into(),
                JsString::from(value.as_ref()).into(),
            ];
            JsArray::from_iter(pair, context).into()
        })
        .collect();
    Ok(JsArray::from_iter(pairs, context).into())
}

/// application/x-www-form-urlencoded serializing of `args[0]`, a list of `[name, value]` pairs.
fn form_serialize(_: &JsValue, args: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    let list = arg(args, 0)
        .as_object()
        .map(JsArray::from_object)
        .transpose()?
        .ok_or_else(|| type_error("expected a list of pairs"))?;
    let mut out = url::form_urlencoded::Serializer::new(String::new());
    for at in 0..list.length(context)? {
        let pair = list
            .get(at, context)?
            .as_object()
            .map(JsArray::from_object)
            .transpose()?
            .ok_or_else(|| type_error("expected a [name, value] pair"))?;
        let name = pair
            .get(0, context)?
            .to_string(context)?
            .to_std_string_lossy();
        let value = pair
            .get(1, context)?
            .to_string(context)?
            .to_std_string_lossy();
        out.append_pair(&name, &value);
    }
    Ok(JsString::from(out.finish().as_str()).into())
}
