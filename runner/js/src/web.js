// The functions that scripts written for browsers or Node take for granted and ECMAScript lacks:
// structuredClone, queueMicrotask, TextEncoder, TextDecoder, atob, btoa, crypto.getRandomValues,
// crypto.randomUUID, performance.now and DOMException. Plain JavaScript over boa's built-ins,
// shared unchanged by both engines, so they behave the same in each. None of them reaches the
// host, except that queueMicrotask logs a failing callback (through the prelude's runCallback);
// crypto takes its bytes from the system's secure random source (wasi:random in the sandbox), as
// Math.random does. `host` is {log, randomBytes, runCallback}, from the prelude.
//
// Compiled when a graph first touches one of these globals (see the prelude), so the built-ins
// captured below are the ones the graph left by then; the functions are not a security
// boundary (nothing here is).
(function (host) {
  "use strict";
  const ObjectPrototype = Object.prototype;
  const getPrototypeOf = Object.getPrototypeOf;
  const setPrototypeOf = Object.setPrototypeOf;
  const defineProperty = Object.defineProperty;
  const ownKeys = Object.keys;
  const isArray = Array.isArray;
  const fromCharCode = String.fromCharCode;
  const apply = Reflect.apply;
  const MapCtor = Map;
  const SetCtor = Set;
  const PromiseCtor = Promise;
  const ErrorCtor = Error;
  const ArrayPrototype = Array.prototype;
  const TypeErrorCtor = TypeError;
  const RangeErrorCtor = RangeError;
  const DataViewCtor = DataView;
  const Uint8ArrayCtor = Uint8Array;
  const TypedArrayPrototype = getPrototypeOf(Uint8Array.prototype);

  function getter(prototype, key) {
    return Object.getOwnPropertyDescriptor(prototype, key).get;
  }
  // Each of these throws a TypeError unless `this` really is the built-in object it belongs to,
  // whatever its prototype or Symbol.toStringTag say.
  const typedArrayName = getter(TypedArrayPrototype, Symbol.toStringTag);
  const typedArrayBuffer = getter(TypedArrayPrototype, "buffer");
  const typedArrayOffset = getter(TypedArrayPrototype, "byteOffset");
  const typedArrayByteLength = getter(TypedArrayPrototype, "byteLength");
  const typedArrayLength = getter(TypedArrayPrototype, "length");
  const arrayBufferLength = getter(ArrayBuffer.prototype, "byteLength");
  const arrayBufferSlice = ArrayBuffer.prototype.slice;
  const dataViewBuffer = getter(DataView.prototype, "buffer");
  const dataViewOffset = getter(DataView.prototype, "byteOffset");
  const dataViewLength = getter(DataView.prototype, "byteLength");
  const objectToString = ObjectPrototype.toString;
  const dateTime = Date.prototype.getTime;
  const regExpSource = getter(RegExp.prototype, "source");
  const regExpFlags = getter(RegExp.prototype, "flags");
  const mapSize = getter(Map.prototype, "size");
  const mapForEach = Map.prototype.forEach;
  const mapSet = Map.prototype.set;
  const mapGet = Map.prototype.get;
  const mapHas = Map.prototype.has;
  const setSize = getter(Set.prototype, "size");
  const setForEach = Set.prototype.forEach;
  const setAdd = Set.prototype.add;
  const TYPED_ARRAYS = {
    Int8Array, Uint8Array, Uint8ClampedArray, Int16Array, Uint16Array, Int32Array, Uint32Array,
    Float32Array, Float64Array, BigInt64Array, BigUint64Array,
  };
  const ERRORS = { Error, EvalError, RangeError, ReferenceError, SyntaxError, TypeError, URIError };
  const weakMapGet = WeakMap.prototype.get;
  const weakMapSet = WeakMap.prototype.set;

  function call(fn, self, ...args) {
    return apply(fn, self, args);
  }

  // Replaces the prelude's placeholder for `name`, unless the graph already replaced or deleted
  // it (the placeholder is the only accessor these names have).
  function global(name, value) {
    const now = Object.getOwnPropertyDescriptor(globalThis, name);
    if (now !== undefined && typeof now.get === "function") {
      defineProperty(globalThis, name, { value, writable: true, enumerable: false, configurable: true });
    }
  }

  // ---- DOMException -----------------------------------------------------------------------

  const DOM_CODES = {
    IndexSizeError: 1, HierarchyRequestError: 3, WrongDocumentError: 4, InvalidCharacterError: 5,
    NoModificationAllowedError: 7, NotFoundError: 8, NotSupportedError: 9, InvalidStateError: 11,
    SyntaxError: 12, InvalidModificationError: 13, NamespaceError: 14, InvalidAccessError: 15,
    TypeMismatchError: 17, SecurityError: 18, NetworkError: 19, AbortError: 20, URLMismatchError: 21,
    QuotaExceededError: 22, TimeoutError: 23, InvalidNodeTypeError: 24, DataCloneError: 25,
  };

  class DOMException extends ErrorCtor {
    constructor(message, name) {
      super(message === undefined ? "" : String(message));
      defineProperty(this, "name", {
        value: name === undefined ? "Error" : String(name),
        writable: true,
        enumerable: false,
        configurable: true,
      });
    }
    get code() {
      const code = DOM_CODES[this.name];
      return typeof code === "number" ? code : 0;
    }
  }

  // ---- structuredClone --------------------------------------------------------------------

  // Where in the cloned value something was found, as `value.a[2]["b c"].keys()[0]`; built only
  // for an error message. A step is an array index, a property name, or {text} as it is shown.
  function pathOf(where) {
    let text = "";
    for (let at = where; at !== null; at = at.parent) {
      const key = at.key;
      let step;
      if (typeof key === "number") {
        step = "[" + key + "]";
      } else if (typeof key === "object") {
        step = key.text;
      } else if (/^[A-Za-z_$][A-Za-z0-9_$]*$/.test(key)) {
        step = "." + key;
      } else {
        step = "[" + JSON.stringify(key) + "]";
      }
      text = step + text;
    }
    return "value" + text;
  }

  function cannotClone(what, where) {
    return new DOMException(
      "structuredClone: " + what + " at " + pathOf(where) + " cannot be cloned",
      "DataCloneError",
    );
  }

  const BRANDS = [
    ["Date", dateTime],
    ["RegExp", regExpSource],
    ["Map", mapSize],
    ["Set", setSize],
    ["ArrayBuffer", arrayBufferLength],
    ["DataView", dataViewLength],
    ["Boolean", Boolean.prototype.valueOf],
    ["Number", Number.prototype.valueOf],
    ["String", String.prototype.valueOf],
    ["BigInt", BigInt.prototype.valueOf],
    ["Symbol", Symbol.prototype.valueOf],
    ["WeakMap", WeakMap.prototype.has],
    ["WeakSet", WeakSet.prototype.has],
    ["WeakRef", WeakRef.prototype.deref],
    ["SharedArrayBuffer", getter(SharedArrayBuffer.prototype, "byteLength")],
  ];

  // Which built-in object `v` is, by its internal slots, not by what it claims to be.
  function kindOf(v) {
    if (isArray(v)) {
      return "Array";
    }
    const typed = call(typedArrayName, v);
    if (typed !== undefined) {
      return typed;
    }
    const tag = call(objectToString, v);
    const proto = getPrototypeOf(v);
    if (tag === "[object Object]" && (proto === ObjectPrototype || proto === null)) {
      return "Object";
    }
    for (let i = 0; i < BRANDS.length; i++) {
      try {
        call(BRANDS[i][1], v, ObjectPrototype);
        return BRANDS[i][0];
      } catch (_) {
        // Not this one.
      }
    }
    if (tag === "[object Error]") {
      return "Error";
    }
    if (v instanceof PromiseCtor) {
      return "Promise";
    }
    return "Object";
  }

  const UNCLONABLE = {
    Symbol: "a Symbol object",
    WeakMap: "a WeakMap",
    WeakSet: "a WeakSet",
    WeakRef: "a WeakRef",
    Promise: "a Promise",
    SharedArrayBuffer: "a SharedArrayBuffer",
  };

  // The HTML structured clone of `value`: JSON-like data, Date, RegExp, Map, Set, ArrayBuffer,
  // typed arrays, DataView, errors and primitive wrappers, with shared and circular references
  // kept. Functions, symbols, promises and weak collections fail with a DataCloneError that
  // says where they were. Iterative, so deep nesting cannot overflow the stack.
  function structuredClone(value, options) {
    if (arguments.length === 0) {
      throw new TypeErrorCtor("structuredClone: 1 argument required, but only 0 present");
    }
    if (options !== undefined && options !== null) {
      if (typeof options !== "object") {
        throw new TypeErrorCtor("structuredClone: the options must be an object");
      }
      const transfer = options.transfer;
      if (transfer !== undefined && transfer !== null && transfer.length > 0) {
        throw new DOMException("structuredClone: transferring objects is not supported", "DataCloneError");
      }
    }
    // original -> its clone; also what keeps shared and circular references.
    const memory = new MapCtor();
    // [kind, original, clone, where] of the objects whose contents are still to be copied.
    const pending = [];

    function copy(v, parent, key) {
      const type = typeof v;
      if (type === "symbol") {
        throw cannotClone("the symbol " + String(v), { parent, key });
      }
      if (type === "function") {
        const name = typeof v.name === "string" && v.name !== "" ? " " + v.name : "";
        throw cannotClone("the function" + name, { parent, key });
      }
      if (v === null || type !== "object") {
        return v;
      }
      if (call(mapHas, memory, v)) {
        return call(mapGet, memory, v);
      }
      const where = { parent, key };
      const kind = kindOf(v);
      let clone;
      switch (kind) {
        // Filled later, with no prototype until then, so that a setter a graph put on
        // Object.prototype (or a key named __proto__) cannot intercept the copy.
        case "Object":
          clone = Object.create(null);
          break;
        case "Array":
          clone = new Array(v.length);
          setPrototypeOf(clone, null);
          break;
        case "Error": {
          // As in the HTML standard: the name if it is a standard one, and an own message.
          const name = v.name;
          const own = Object.getOwnPropertyDescriptor(v, "message");
          const message = own !== undefined && "value" in own ? String(own.value) : undefined;
          clone = new ERRORS[typeof name === "string" && ERRORS[name] !== undefined ? name : "Error"](message);
          break;
        }
        case "Date":
          clone = new Date(call(dateTime, v));
          break;
        case "RegExp":
          clone = new RegExp(call(regExpSource, v), call(regExpFlags, v));
          break;
        case "Map":
          clone = new MapCtor();
          break;
        case "Set":
          clone = new SetCtor();
          break;
        case "ArrayBuffer":
          clone = call(arrayBufferSlice, v, 0);
          break;
        case "Boolean":
          clone = new Boolean(call(Boolean.prototype.valueOf, v));
          break;
        case "Number":
          clone = new Number(call(Number.prototype.valueOf, v));
          break;
        case "String":
          clone = new String(call(String.prototype.valueOf, v));
          break;
        case "BigInt":
          clone = Object(call(BigInt.prototype.valueOf, v));
          break;
        case "DataView":
        default: {
          if (kind !== "DataView" && TYPED_ARRAYS[kind] === undefined) {
            throw cannotClone(UNCLONABLE[kind] || "a " + kind, where);
          }
          // A view: its buffer is cloned once, so views that share a buffer still do.
          const buffer = copy(call(kind === "DataView" ? dataViewBuffer : typedArrayBuffer, v), where, { text: ".buffer" });
          if (kind === "DataView") {
            clone = new DataViewCtor(buffer, call(dataViewOffset, v), call(dataViewLength, v));
          } else {
            clone = new TYPED_ARRAYS[kind](buffer, call(typedArrayOffset, v), call(typedArrayLength, v));
          }
        }
      }
      call(mapSet, memory, v, clone);
      if (kind === "Object" || kind === "Array" || kind === "Map" || kind === "Set") {
        pending.push([kind, v, clone, where]);
      }
      return clone;
    }

    function fill(kind, v, clone, where) {
      if (kind === "Map") {
        const entries = [];
        call(mapForEach, v, (entryValue, entryKey) => entries.push(entryKey, entryValue));
        for (let i = 0; i < entries.length; i += 2) {
          const n = i / 2;
          const k = copy(entries[i], where, { text: ".keys()[" + n + "]" });
          call(mapSet, clone, k, copy(entries[i + 1], where, { text: ".values()[" + n + "]" }));
        }
        return;
      }
      if (kind === "Set") {
        const entries = [];
        call(setForEach, v, (entry) => entries.push(entry));
        for (let i = 0; i < entries.length; i++) {
          call(setAdd, clone, copy(entries[i], where, { text: ".values()[" + i + "]" }));
        }
        return;
      }
      const keys = ownKeys(v);
      for (let i = 0; i < keys.length; i++) {
        const key = keys[i];
        const index = kind === "Array" && String(+key) === key ? +key : key;
        clone[key] = copy(v[key], where, index);
      }
      setPrototypeOf(clone, kind === "Array" ? ArrayPrototype : ObjectPrototype);
    }

    const root = copy(value, null, { text: "" });
    while (pending.length > 0) {
      const [kind, v, clone, where] = pending.pop();
      fill(kind, v, clone, where);
    }
    return root;
  }

  // ---- queueMicrotask ---------------------------------------------------------------------

  function queueMicrotask(callback) {
    if (typeof callback !== "function") {
      throw new TypeErrorCtor("queueMicrotask: the callback must be a function");
    }
    PromiseCtor.resolve().then(() => host.runCallback("queueMicrotask", callback, []));
  }

  // ---- TextEncoder and TextDecoder (UTF-8, as in the WHATWG Encoding standard) -------------

  // The bytes of any buffer source, without copying them.
  function bytesOf(input, what) {
    if (input === undefined) {
      return new Uint8ArrayCtor(0);
    }
    const kind = input !== null && typeof input === "object" ? kindOf(input) : undefined;
    if (TYPED_ARRAYS[kind] !== undefined) {
      return new Uint8ArrayCtor(call(typedArrayBuffer, input), call(typedArrayOffset, input), call(typedArrayByteLength, input));
    }
    if (kind === "ArrayBuffer") {
      return new Uint8ArrayCtor(input);
    }
    if (kind === "DataView") {
      return new Uint8ArrayCtor(call(dataViewBuffer, input), call(dataViewOffset, input), call(dataViewLength, input));
    }
    throw new TypeErrorCtor(what + ": the input must be an ArrayBuffer, a typed array or a DataView");
  }

  // The UTF-8 length of `s` in bytes: 4 for a surrogate pair, 3 for a lone surrogate (written as
  // U+FFFD).
  function utf8Length(s) {
    let n = 0;
    for (let i = 0; i < s.length; i++) {
      const c = s.charCodeAt(i);
      if (c < 0x80) {
        n += 1;
      } else if (c < 0x800) {
        n += 2;
      } else if ((c & 0xfc00) === 0xd800 && i + 1 < s.length && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
        n += 4;
        i++;
      } else {
        n += 3;
      }
    }
    return n;
  }

  // Writes `s` into `out` while whole characters fit; answers [code units read, bytes written].
  function writeUtf8(s, out) {
    let at = 0;
    let i = 0;
    for (; i < s.length; i++) {
      let c = s.charCodeAt(i);
      let size;
      let pair = false;
      if (c < 0x80) {
        size = 1;
      } else if (c < 0x800) {
        size = 2;
      } else if ((c & 0xfc00) === 0xd800 && i + 1 < s.length && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
        c = 0x10000 + ((c - 0xd800) << 10) + (s.charCodeAt(i + 1) - 0xdc00);
        size = 4;
        pair = true;
      } else {
        if ((c & 0xf800) === 0xd800) {
          c = 0xfffd;
        }
        size = 3;
      }
      if (at + size > out.length) {
        break;
      }
      if (size === 1) {
        out[at++] = c;
      } else if (size === 2) {
        out[at++] = 0xc0 | (c >> 6);
        out[at++] = 0x80 | (c & 0x3f);
      } else if (size === 3) {
        out[at++] = 0xe0 | (c >> 12);
        out[at++] = 0x80 | ((c >> 6) & 0x3f);
        out[at++] = 0x80 | (c & 0x3f);
      } else {
        out[at++] = 0xf0 | (c >> 18);
        out[at++] = 0x80 | ((c >> 12) & 0x3f);
        out[at++] = 0x80 | ((c >> 6) & 0x3f);
        out[at++] = 0x80 | (c & 0x3f);
      }
      if (pair) {
        i++;
      }
    }
    return [i, at];
  }

  class TextEncoder {
    get encoding() {
      return "utf-8";
    }
    encode(input) {
      const s = input === undefined ? "" : String(input);
      const out = new Uint8ArrayCtor(utf8Length(s));
      writeUtf8(s, out);
      return out;
    }
    encodeInto(source, destination) {
      if (call(typedArrayName, destination) !== "Uint8Array") {
        throw new TypeErrorCtor("TextEncoder.encodeInto: the destination must be a Uint8Array");
      }
      const [read, written] = writeUtf8(String(source), destination);
      return { read, written };
    }
  }

  const UTF8_LABELS = ["unicode-1-1-utf-8", "unicode11utf8", "unicode20utf8", "utf-8", "utf8", "x-unicode20utf8"];
  const decoders = new WeakMap();

  // Turns a list of code units into a string a chunk at a time (a call takes only so many
  // arguments).
  function unitsToString(units) {
    let text = "";
    for (let i = 0; i < units.length; i += 8192) {
      text += apply(fromCharCode, null, units.slice(i, i + 8192));
    }
    return text;
  }

  class TextDecoder {
    constructor(label, options) {
      const name = label === undefined ? "utf-8" : String(label).trim().toLowerCase();
      if (!UTF8_LABELS.includes(name)) {
        throw new RangeErrorCtor(
          'TextDecoder: the encoding "' + String(label) + '" is not supported; only UTF-8 is',
        );
      }
      const opts = options === undefined || options === null ? {} : options;
      // The options, and the decoder's state between calls with {stream: true}.
      const d = { fatal: !!opts.fatal, ignoreBOM: !!opts.ignoreBOM, bomSeen: false, flushed: true };
      startCharacter(d);
      call(weakMapSet, decoders, this, d);
    }
    get encoding() {
      return "utf-8";
    }
    get fatal() {
      return state(this).fatal;
    }
    get ignoreBOM() {
      return state(this).ignoreBOM;
    }
    decode(input, options) {
      const d = state(this);
      const bytes = bytesOf(input, "TextDecoder.decode");
      const stream = options !== undefined && options !== null && !!options.stream;
      if (d.flushed) {
        startCharacter(d);
        d.bomSeen = false;
      }
      d.flushed = !stream;
      const units = [];
      const emit = (point) => {
        if (!d.bomSeen) {
          d.bomSeen = true;
          if (point === 0xfeff && !d.ignoreBOM) {
            return;
          }
        }
        if (point > 0xffff) {
          point -= 0x10000;
          units.push(0xd800 + (point >> 10), 0xdc00 + (point & 0x3ff));
        } else {
          units.push(point);
        }
      };
      const invalid = () => {
        if (d.fatal) {
          d.flushed = true;
          throw new TypeErrorCtor("TextDecoder.decode: the data is not valid UTF-8");
        }
        emit(0xfffd);
      };
      for (let i = 0; i < bytes.length; i++) {
        const b = bytes[i];
        if (d.needed === 0) {
          if (b < 0x80) {
            emit(b);
          } else if (b >= 0xc2 && b <= 0xdf) {
            d.needed = 1;
            d.point = b & 0x1f;
          } else if (b >= 0xe0 && b <= 0xef) {
            if (b === 0xe0) {
              d.lower = 0xa0;
            } else if (b === 0xed) {
              d.upper = 0x9f;
            }
            d.needed = 2;
            d.point = b & 0xf;
          } else if (b >= 0xf0 && b <= 0xf4) {
            if (b === 0xf0) {
              d.lower = 0x90;
            } else if (b === 0xf4) {
              d.upper = 0x8f;
            }
            d.needed = 3;
            d.point = b & 0x7;
          } else {
            invalid();
          }
          continue;
        }
        if (b < d.lower || b > d.upper) {
          startCharacter(d);
          invalid();
          // The byte starts over, as the first of the next character.
          i--;
          continue;
        }
        d.lower = 0x80;
        d.upper = 0xbf;
        d.point = (d.point << 6) | (b & 0x3f);
        d.seen++;
        if (d.seen === d.needed) {
          const point = d.point;
          d.needed = 0;
          d.seen = 0;
          d.point = 0;
          emit(point);
        }
      }
      if (!stream && d.needed !== 0) {
        startCharacter(d);
        invalid();
      }
      return unitsToString(units);
    }
  }

  // The decoder state between characters.
  function startCharacter(d) {
    d.needed = 0;
    d.seen = 0;
    d.point = 0;
    d.lower = 0x80;
    d.upper = 0xbf;
  }

  function state(decoder) {
    const d = call(weakMapGet, decoders, decoder);
    if (d === undefined) {
      throw new TypeErrorCtor("TextDecoder: not a TextDecoder");
    }
    return d;
  }

  // ---- atob and btoa (forgiving base64, as in the HTML standard) --------------------------

  const BASE64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

  function btoa(data) {
    if (arguments.length === 0) {
      throw new TypeErrorCtor("btoa: 1 argument required, but only 0 present");
    }
    const s = String(data);
    const out = [];
    for (let i = 0; i < s.length; i += 3) {
      const a = s.charCodeAt(i);
      const b = i + 1 < s.length ? s.charCodeAt(i + 1) : 0;
      const c = i + 2 < s.length ? s.charCodeAt(i + 2) : 0;
      if (a > 0xff || b > 0xff || c > 0xff) {
        throw new DOMException(
          "btoa: the string has a character outside Latin-1; encode it first, e.g. with TextEncoder",
          "InvalidCharacterError",
        );
      }
      const bits = (a << 16) | (b << 8) | c;
      out.push(
        BASE64[bits >> 18],
        BASE64[(bits >> 12) & 63],
        i + 1 < s.length ? BASE64[(bits >> 6) & 63] : "=",
        i + 2 < s.length ? BASE64[bits & 63] : "=",
      );
    }
    return out.join("");
  }

  // Each ASCII code's value in base64, or -1.
  const BASE64_VALUES = [];
  for (let c = 0; c < 128; c++) {
    BASE64_VALUES.push(BASE64.indexOf(fromCharCode(c)));
  }

  function atob(data) {
    if (arguments.length === 0) {
      throw new TypeErrorCtor("atob: 1 argument required, but only 0 present");
    }
    const s = String(data);
    const units = [];
    let bits = 0;
    let count = 0;
    // Characters other than whitespace, and how many of them are the `=` that may end it.
    let length = 0;
    let padding = 0;
    let valid = true;
    for (let i = 0; i < s.length && valid; i++) {
      const c = s.charCodeAt(i);
      if (c === 0x09 || c === 0x0a || c === 0x0c || c === 0x0d || c === 0x20) {
        continue;
      }
      length++;
      if (c === 0x3d) {
        padding++;
        continue;
      }
      const value = c < 128 ? BASE64_VALUES[c] : -1;
      // Padding only ends the text.
      valid = value >= 0 && padding === 0;
      bits = ((bits << 6) | value) & 0xffffff;
      count += 6;
      if (count >= 8) {
        count -= 8;
        units.push((bits >> count) & 0xff);
      }
    }
    // As the HTML standard reads it: up to two `=` end a text whose length is a multiple of
    // four; what is left may not be one more than a multiple of four.
    if (!valid || (padding > 0 && (length % 4 !== 0 || padding > 2)) || (length - padding) % 4 === 1) {
      throw new DOMException("atob: the string is not valid base64", "InvalidCharacterError");
    }
    return unitsToString(units);
  }

  // ---- crypto.getRandomValues and crypto.randomUUID ----------------------------------------

  const INTEGER_ARRAYS = [
    "Int8Array", "Uint8Array", "Uint8ClampedArray", "Int16Array", "Uint16Array", "Int32Array", "Uint32Array",
    "BigInt64Array", "BigUint64Array",
  ];
  const MAX_RANDOM_BYTES = 65536;

  function getRandomValues(array) {
    const kind = array !== null && typeof array === "object" ? call(typedArrayName, array) : undefined;
    if (kind === undefined) {
      throw new TypeErrorCtor("crypto.getRandomValues: the argument must be an integer typed array, such as a Uint8Array");
    }
    if (!INTEGER_ARRAYS.includes(kind)) {
      throw new DOMException("crypto.getRandomValues: a " + kind + " cannot take random values; use an integer typed array", "TypeMismatchError");
    }
    const length = call(typedArrayByteLength, array);
    if (length > MAX_RANDOM_BYTES) {
      throw new DOMException(
        "crypto.getRandomValues: at most " + MAX_RANDOM_BYTES + " bytes at a time, the array has " + length,
        "QuotaExceededError",
      );
    }
    const target = new Uint8ArrayCtor(call(typedArrayBuffer, array), call(typedArrayOffset, array), length);
    target.set(host.randomBytes(length));
    return array;
  }

  // A version 4 UUID: 122 random bits, as RFC 9562 lays them out.
  function randomUUID() {
    const bytes = host.randomBytes(16);
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let text = "";
    for (let i = 0; i < 16; i++) {
      text += (bytes[i] < 16 ? "0" : "") + bytes[i].toString(16);
      if (i === 3 || i === 5 || i === 7 || i === 9) {
        text += "-";
      }
    }
    return text;
  }

  // ---- performance.now ---------------------------------------------------------------------

  // Milliseconds since the run first asked, never decreasing (Date.now() is the wall clock and
  // may step back). The origin is taken at that first call, not when this file is compiled:
  // the sandbox compiles it into a snapshot long before any run.
  const dateNow = Date.now;
  let origin;
  let latest = 0;
  function originNow() {
    const t = dateNow();
    if (origin === undefined) {
      origin = t;
    }
    return t;
  }
  const performance = Object.freeze({
    now() {
      const t = originNow() - origin;
      latest = t > latest ? t : latest;
      return latest;
    },
    get timeOrigin() {
      originNow();
      return origin;
    },
  });

  global("DOMException", DOMException);
  global("performance", performance);
  global("crypto", Object.freeze({ getRandomValues, randomUUID }));
  global("structuredClone", structuredClone);
  global("queueMicrotask", queueMicrotask);
  global("TextEncoder", TextEncoder);
  global("TextDecoder", TextDecoder);
  global("atob", atob);
  global("btoa", btoa);
})
