// The functions that scripts written for browsers or Node take for granted and ECMAScript lacks:
// structuredClone, queueMicrotask, TextEncoder, TextDecoder, atob, btoa, crypto.getRandomValues,
// crypto.randomUUID, performance.now, DOMException, URL and URLSearchParams. Plain JavaScript
// over boa's built-ins, shared unchanged by both engines, so they behave the same in each. None
// of them reaches the host, except that queueMicrotask logs a failing callback (through the
// prelude's runCallback); crypto takes its bytes from the run's random source
// (the host's random-bytes), as Math.random does; and URL's host parser has the host map
// international domain names (pure computation over Unicode's tables). `host` is {log,
// randomBytes, monotonicNow, domainToAscii, runCallback, install}, from the prelude.
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

  // The UTF-8 bytes of `s`, allocated once.
  function encodeUtf8(s) {
    const out = new Uint8ArrayCtor(utf8Length(s));
    writeUtf8(s, out);
    return out;
  }

  class TextEncoder {
    get encoding() {
      return "utf-8";
    }
    encode(input) {
      return encodeUtf8(input === undefined ? "" : String(input));
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

  // The run's monotonic clock in whole milliseconds since the run started (the host's
  // clock-now: virtual under --clock fixed:..., never finer than 1 ms in real runs). The time
  // origin is the wall time at which it read 0, taken at the first use.
  const dateNow = Date.now;
  const monotonicNow = host.monotonicNow;
  let origin;
  function originOnce() {
    if (origin === undefined) {
      origin = dateNow() - monotonicNow();
    }
    return origin;
  }
  const performance = Object.freeze({
    now() {
      return monotonicNow();
    },
    get timeOrigin() {
      return originOnce();
    },
  });

  // ---- URL and URLSearchParams (the WHATWG URL standard) ------------------------------------

  // A parsed URL: {scheme, username, password, host, port, path, query, fragment}. host is
  // null, a string (a domain, an opaque host or ""), a number (IPv4) or an array of eight
  // numbers (IPv6); port is null or a number; path is a string when opaque, else a list of
  // segments; query and fragment are null or a string.
  const SPECIAL_PORTS = { "ftp:": 21, "file:": null, "http:": 80, "https:": 443, "ws:": 80, "wss:": 443 };
  function isSpecialScheme(scheme) {
    return SPECIAL_PORTS[scheme + ":"] !== undefined;
  }
  function defaultPort(scheme) {
    const port = SPECIAL_PORTS[scheme + ":"];
    return port === undefined ? null : port;
  }

  function isAlpha(c) {
    return c !== undefined && ((c >= "a" && c <= "z") || (c >= "A" && c <= "Z"));
  }
  function isDigit(c) {
    return c !== undefined && c >= "0" && c <= "9";
  }
  function isHexDigit(c) {
    return isDigit(c) || (c !== undefined && ((c >= "a" && c <= "f") || (c >= "A" && c <= "F")));
  }

  // Percent-encode sets, as a table of the ASCII code points each holds (1: encode); every set
  // holds the C0 controls and everything above U+007E.
  function percentSet(extra) {
    const table = new Uint8ArrayCtor(128);
    for (let cp = 0; cp < 128; cp++) {
      table[cp] = cp < 0x20 || cp > 0x7e || extra.includes(fromCharCode(cp)) ? 1 : 0;
    }
    return table;
  }
  const C0_CONTROL_SET = percentSet("");
  const FRAGMENT_SET = percentSet(' "<>`');
  const QUERY_SET = percentSet(' "#<>');
  const SPECIAL_QUERY_SET = percentSet(' "#<>\'');
  const PATH_SET = percentSet(' "#<>?^`{}');
  const USERINFO_SET = percentSet(' "#<>?^`{}/:;=@[\\]|');
  const FORM_SET = percentSet(' "#<>?^`{}/:;=@[\\]|$%&+,!\'()~');

  // Compiled once, with web.js (a regular expression literal is compiled again each time it is
  // evaluated, which would cost more than the rest of a parse).
  const NON_ASCII = /[^\x00-\x7f]/;
  const SURROGATE = /[\ud800-\udfff]/;
  const DIGITS = /^[0-9]+$/;
  const PUNYCODE_LABEL = /(^|\.)xn--/i;
  const OUTER_C0_AND_SPACES = /^[\x00-\x20]+|[\x00-\x20]+$/g;
  const TABS_AND_NEWLINES = /[\t\n\r]/g;
  const PLUSES = /\+/g;

  const HEX = "0123456789ABCDEF";
  function percentByte(b) {
    return "%" + HEX[b >> 4] + HEX[b & 15];
  }
  // One code point (a string of one or two code units, never a lone surrogate here), UTF-8
  // percent-encoded when `set` holds it.
  const scratch = new Uint8ArrayCtor(4);
  function encodeCodePoint(c, set) {
    const unit = c.charCodeAt(0);
    if (unit < 0x80) {
      return set[unit] === 1 ? percentByte(unit) : c;
    }
    const written = writeUtf8(c, scratch)[1];
    let out = "";
    for (let i = 0; i < written; i++) {
      out += percentByte(scratch[i]);
    }
    return out;
  }
  // A well-formed string, each code point in `set` percent-encoded (and each space a "+" when
  // `spaceAsPlus`); the string itself when nothing needs encoding.
  function encodeString(s, set, spaceAsPlus) {
    let out = "";
    let from = 0;
    for (let i = 0; i < s.length; i++) {
      const unit = s.charCodeAt(i);
      if (unit < 0x80 && set[unit] === 0) {
        continue;
      }
      const pair = unit >= 0xd800 && unit <= 0xdbff && i + 1 < s.length;
      const c = pair ? s.slice(i, i + 2) : s[i];
      out += s.slice(from, i) + (spaceAsPlus && unit === 0x20 ? "+" : encodeCodePoint(c, set));
      i += pair ? 1 : 0;
      from = i + 1;
    }
    return from === 0 ? s : out + s.slice(from);
  }

  // `value` as a USVString argument: converted to a string, each lone surrogate replaced by
  // U+FFFD.
  const toWellFormed = String.prototype.toWellFormed;
  function toUSVString(value) {
    return call(toWellFormed, String(value));
  }

  // "UTF-8 decode without BOM": a U+FEFF at the start stays. One decoder serves every call (a
  // call without {stream: true} starts from a clean state).
  const decode = TextDecoder.prototype.decode;
  const keepingBOM = new TextDecoder("utf-8", { ignoreBOM: true });

  // The bytes of `s` with each %XX turned into its byte, decoded as UTF-8 (broken sequences
  // become U+FFFD).
  function percentDecode(s) {
    if (!s.includes("%") && !NON_ASCII.test(s)) {
      return s;
    }
    const bytes = encodeUtf8(s);
    const out = new Uint8ArrayCtor(bytes.length);
    let n = 0;
    for (let i = 0; i < bytes.length; i++) {
      const b = bytes[i];
      if (b === 0x25 && i + 2 < bytes.length && isHexDigit(fromCharCode(bytes[i + 1])) && isHexDigit(fromCharCode(bytes[i + 2]))) {
        out[n++] = parseInt(fromCharCode(bytes[i + 1], bytes[i + 2]), 16);
        i += 2;
      } else {
        out[n++] = b;
      }
    }
    return call(decode, keepingBOM, out.subarray(0, n));
  }

  // ---- hosts ----

  function parseIPv4Number(s) {
    if (s === "") {
      return NaN;
    }
    let radix = 10;
    if (s.length >= 2 && (s.startsWith("0x") || s.startsWith("0X"))) {
      radix = 16;
      s = s.slice(2);
    } else if (s.length >= 2 && s[0] === "0") {
      radix = 8;
      s = s.slice(1);
    }
    if (s === "") {
      return 0;
    }
    for (const c of s) {
      if (radix === 10 ? !isDigit(c) : radix === 16 ? !isHexDigit(c) : !(c >= "0" && c <= "7")) {
        return NaN;
      }
    }
    return parseInt(s, radix);
  }

  function endsInANumber(s) {
    const parts = s.split(".");
    if (parts[parts.length - 1] === "") {
      if (parts.length === 1) {
        return false;
      }
      parts.pop();
    }
    const last = parts[parts.length - 1];
    if (last !== "" && DIGITS.test(last)) {
      return true;
    }
    return !Number.isNaN(parseIPv4Number(last));
  }

  function parseIPv4(s) {
    const parts = s.split(".");
    if (parts[parts.length - 1] === "" && parts.length > 1) {
      parts.pop();
    }
    if (parts.length > 4) {
      return null;
    }
    const numbers = [];
    for (const part of parts) {
      const n = parseIPv4Number(part);
      if (Number.isNaN(n)) {
        return null;
      }
      numbers.push(n);
    }
    for (let i = 0; i < numbers.length - 1; i++) {
      if (numbers[i] > 255) {
        return null;
      }
    }
    const last = numbers[numbers.length - 1];
    if (last >= 256 ** (5 - numbers.length)) {
      return null;
    }
    let address = last;
    for (let i = 0; i < numbers.length - 1; i++) {
      address += numbers[i] * 256 ** (3 - i);
    }
    return address;
  }

  function parseIPv6(s) {
    const address = [0, 0, 0, 0, 0, 0, 0, 0];
    let piece = 0;
    let compress = null;
    let p = 0;
    if (s[p] === ":") {
      if (s[p + 1] !== ":") {
        return null;
      }
      p += 2;
      piece++;
      compress = piece;
    }
    while (p < s.length) {
      if (piece === 8) {
        return null;
      }
      if (s[p] === ":") {
        if (compress !== null) {
          return null;
        }
        p++;
        piece++;
        compress = piece;
        continue;
      }
      let value = 0;
      let length = 0;
      while (length < 4 && isHexDigit(s[p])) {
        value = value * 16 + parseInt(s[p], 16);
        p++;
        length++;
      }
      if (s[p] === ".") {
        if (length === 0) {
          return null;
        }
        p -= length;
        if (piece > 6) {
          return null;
        }
        let seen = 0;
        while (p < s.length) {
          let part = null;
          if (seen > 0) {
            if (s[p] === "." && seen < 4) {
              p++;
            } else {
              return null;
            }
          }
          if (!isDigit(s[p])) {
            return null;
          }
          while (isDigit(s[p])) {
            const n = s.charCodeAt(p) - 48;
            if (part === null) {
              part = n;
            } else if (part === 0) {
              return null;
            } else {
              part = part * 10 + n;
            }
            if (part > 255) {
              return null;
            }
            p++;
          }
          address[piece] = address[piece] * 0x100 + part;
          seen++;
          if (seen === 2 || seen === 4) {
            piece++;
          }
        }
        if (seen !== 4) {
          return null;
        }
        break;
      } else if (s[p] === ":") {
        p++;
        if (p >= s.length) {
          return null;
        }
      } else if (p < s.length) {
        return null;
      }
      address[piece] = value;
      piece++;
    }
    if (compress !== null) {
      let swaps = piece - compress;
      piece = 7;
      while (piece !== 0 && swaps > 0) {
        const t = address[piece];
        address[piece] = address[compress + swaps - 1];
        address[compress + swaps - 1] = t;
        piece--;
        swaps--;
      }
    } else if (piece !== 8) {
      return null;
    }
    return address;
  }

  function serializeHost(host) {
    if (typeof host === "number") {
      return [host >>> 24, (host >>> 16) & 255, (host >>> 8) & 255, host & 255].join(".");
    }
    if (typeof host !== "object") {
      return host;
    }
    // The first longest run of two or more zero pieces becomes "::".
    let best = -1;
    let bestLength = 1;
    for (let i = 0; i < 8; ) {
      let j = i;
      while (j < 8 && host[j] === 0) {
        j++;
      }
      if (j - i > bestLength) {
        best = i;
        bestLength = j - i;
      }
      i = j === i ? i + 1 : j;
    }
    let out = "[";
    for (let i = 0; i < 8; i++) {
      if (i === best) {
        out += i === 0 ? "::" : ":";
        i += bestLength - 1;
        continue;
      }
      out += host[i].toString(16) + (i < 7 ? ":" : "");
    }
    return out + "]";
  }

  const FORBIDDEN_HOST = "\0\t\n\r #/:<>?@[\\]^|";
  function forbiddenHost(c) {
    return FORBIDDEN_HOST.includes(c);
  }
  function forbiddenDomain(c) {
    const cp = c.charCodeAt(0);
    return forbiddenHost(c) || cp <= 0x1f || c === "%" || cp === 0x7f;
  }

  // Domain to ASCII. A domain of plain ASCII with no Punycode label is lowercased, as the
  // standard says; any other goes to the host (UTS #46, which needs Unicode's tables).
  function domainToASCII(domain) {
    if (!NON_ASCII.test(domain) && !PUNYCODE_LABEL.test(domain)) {
      return domain.toLowerCase();
    }
    return host.domainToAscii(domain);
  }

  // A host, or null when it is not valid.
  function parseHost(input, special) {
    if (input.startsWith("[")) {
      return input.endsWith("]") ? parseIPv6(input.slice(1, -1)) : null;
    }
    if (!special) {
      for (const c of input) {
        if (forbiddenHost(c)) {
          return null;
        }
      }
      return encodeString(input, C0_CONTROL_SET, false);
    }
    const ascii = domainToASCII(percentDecode(input));
    if (ascii === null || ascii === "") {
      return null;
    }
    for (const c of ascii) {
      if (forbiddenDomain(c)) {
        return null;
      }
    }
    if (endsInANumber(ascii)) {
      return parseIPv4(ascii);
    }
    return ascii;
  }

  // ---- the basic URL parser ----

  function isWindowsDriveLetter(s, normalizedOnly) {
    return s.length === 2 && isAlpha(s[0]) && (s[1] === ":" || (!normalizedOnly && s[1] === "|"));
  }
  // Whether the code points from `at` start with a Windows drive letter.
  function startsWithDriveLetter(cps, at) {
    if (cps.length - at < 2 || !isAlpha(cps[at]) || (cps[at + 1] !== ":" && cps[at + 1] !== "|")) {
      return false;
    }
    const third = cps[at + 2];
    return cps.length - at === 2 || third === "/" || third === "\\" || third === "?" || third === "#";
  }
  function isSingleDot(s) {
    return s === "." || s.toLowerCase() === "%2e";
  }
  function isDoubleDot(s) {
    const l = s.toLowerCase();
    return l === ".." || l === ".%2e" || l === "%2e." || l === "%2e%2e";
  }
  function shortenPath(url) {
    const path = url.path;
    if (url.scheme === "file" && path.length === 1 && isWindowsDriveLetter(path[0], true)) {
      return;
    }
    path.pop();
  }
  function hasCredentials(url) {
    return url.username !== "" || url.password !== "";
  }
  // Whether `c` ends an authority, a host or a port (a file host: `special` true).
  function endsAuthority(c, special) {
    return c === undefined || c === "/" || c === "?" || c === "#" || (special && c === "\\");
  }
  function copyAuthority(url, base) {
    url.username = base.username;
    url.password = base.password;
    url.host = base.host;
    url.port = base.port;
  }
  function cannotHaveCredentialsOrPort(url) {
    return url.host === null || url.host === "" || url.scheme === "file";
  }

  // The parser's states.
  const S_SCHEME_START = 1;
  const S_SCHEME = 2;
  const S_NO_SCHEME = 3;
  const S_SPECIAL_RELATIVE_OR_AUTHORITY = 4;
  const S_PATH_OR_AUTHORITY = 5;
  const S_RELATIVE = 6;
  const S_RELATIVE_SLASH = 7;
  const S_SPECIAL_AUTHORITY_SLASHES = 8;
  const S_SPECIAL_AUTHORITY_IGNORE_SLASHES = 9;
  const S_AUTHORITY = 10;
  const S_HOST = 11;
  const S_HOSTNAME = 12;
  const S_PORT = 13;
  const S_FILE = 14;
  const S_FILE_SLASH = 15;
  const S_FILE_HOST = 16;
  const S_PATH_START = 17;
  const S_PATH = 18;
  const S_OPAQUE_PATH = 19;
  const S_QUERY = 20;
  const S_FRAGMENT = 21;

  const FAILURE = {};

  // Parses `input` into a new URL record (against `base`, a record or null), or, given a state,
  // into `url` from that state on (the setters). Answers the record, FAILURE, or undefined
  // when a setter's input is ignored.
  function parseURL(input, base, url, stateOverride) {
    if (url === undefined) {
      url = { scheme: "", username: "", password: "", host: null, port: null, path: [], query: null, fragment: null };
      input = input.replace(OUTER_C0_AND_SPACES, "");
    }
    input = input.replace(TABS_AND_NEWLINES, "");
    // The input's code points: the string itself when it has no surrogate pair (indexing it
    // then gives the same one-character strings, without building an array).
    const cps = SURROGATE.test(input) ? Array.from(input) : input;
    let state = stateOverride || S_SCHEME_START;
    let buffer = "";
    let atSignSeen = false;
    let insideBrackets = false;
    let passwordTokenSeen = false;
    // Whether url's scheme is special, worked out again only when the scheme changes.
    let scheme = null;
    let special = false;
    for (let p = 0; ; p++) {
      const c = cps[p];
      if (url.scheme !== scheme) {
        scheme = url.scheme;
        special = isSpecialScheme(scheme);
      }
      switch (state) {
        // The states a character most often meets come first (a switch tries its cases in order).
        case S_PATH:
          if (c === undefined || c === "/" || (special && c === "\\") || (!stateOverride && (c === "?" || c === "#"))) {
            const slash = c === "/" || (special && c === "\\");
            if (isDoubleDot(buffer)) {
              shortenPath(url);
              if (!slash) {
                url.path.push("");
              }
            } else if (isSingleDot(buffer) && !slash) {
              url.path.push("");
            } else if (!isSingleDot(buffer)) {
              if (url.scheme === "file" && url.path.length === 0 && isWindowsDriveLetter(buffer, false)) {
                buffer = buffer[0] + ":";
              }
              url.path.push(buffer);
            }
            buffer = "";
            if (c === "?") {
              url.query = "";
              state = S_QUERY;
            } else if (c === "#") {
              url.fragment = "";
              state = S_FRAGMENT;
            }
          } else {
            buffer += encodeCodePoint(c, PATH_SET);
          }
          break;
        case S_QUERY:
          if ((!stateOverride && c === "#") || c === undefined) {
            url.query += encodeString(buffer, special ? SPECIAL_QUERY_SET : QUERY_SET, false);
            buffer = "";
            if (c === "#") {
              url.fragment = "";
              state = S_FRAGMENT;
            }
          } else {
            buffer += c;
          }
          break;
        case S_FRAGMENT:
          if (c !== undefined) {
            url.fragment += encodeCodePoint(c, FRAGMENT_SET);
          }
          break;
        case S_OPAQUE_PATH:
          if (c === "?") {
            url.query = "";
            state = S_QUERY;
          } else if (c === "#") {
            url.fragment = "";
            state = S_FRAGMENT;
          } else if (c === " ") {
            // A space right before the query or fragment is encoded, so that removing those
            // later cannot leave a trailing space.
            url.path += cps[p + 1] === "?" || cps[p + 1] === "#" ? "%20" : " ";
          } else if (c !== undefined) {
            url.path += encodeCodePoint(c, C0_CONTROL_SET);
          }
          break;
        case S_AUTHORITY:
          if (c === "@") {
            if (atSignSeen) {
              buffer = "%40" + buffer;
            }
            atSignSeen = true;
            for (const b of buffer) {
              if (b === ":" && !passwordTokenSeen) {
                passwordTokenSeen = true;
                continue;
              }
              if (passwordTokenSeen) {
                url.password += encodeCodePoint(b, USERINFO_SET);
              } else {
                url.username += encodeCodePoint(b, USERINFO_SET);
              }
            }
            buffer = "";
          } else if (endsAuthority(c, special)) {
            if (atSignSeen && buffer === "") {
              return FAILURE;
            }
            p -= Array.from(buffer).length + 1;
            buffer = "";
            state = S_HOST;
          } else {
            buffer += c;
          }
          break;
        case S_HOST:
        case S_HOSTNAME:
          if (stateOverride && url.scheme === "file") {
            p--;
            state = S_FILE_HOST;
          } else if (c === ":" && !insideBrackets) {
            if (buffer === "") {
              return FAILURE;
            }
            if (stateOverride === S_HOSTNAME) {
              return undefined;
            }
            const host = parseHost(buffer, special);
            if (host === null) {
              return FAILURE;
            }
            url.host = host;
            buffer = "";
            state = S_PORT;
          } else if (endsAuthority(c, special)) {
            p--;
            if (special && buffer === "") {
              return FAILURE;
            }
            if (stateOverride && buffer === "" && (hasCredentials(url) || url.port !== null)) {
              return undefined;
            }
            const host = parseHost(buffer, special);
            if (host === null) {
              return FAILURE;
            }
            url.host = host;
            buffer = "";
            state = S_PATH_START;
            if (stateOverride) {
              return url;
            }
          } else {
            if (c === "[") {
              insideBrackets = true;
            } else if (c === "]") {
              insideBrackets = false;
            }
            buffer += c;
          }
          break;
        case S_PORT:
          if (isDigit(c)) {
            buffer += c;
          } else if (endsAuthority(c, special) || stateOverride) {
            if (buffer !== "") {
              const port = parseInt(buffer, 10);
              if (port > 65535) {
                return FAILURE;
              }
              url.port = port === defaultPort(url.scheme) ? null : port;
              buffer = "";
              if (stateOverride) {
                return url;
              }
            }
            if (stateOverride) {
              return FAILURE;
            }
            state = S_PATH_START;
            p--;
          } else {
            return FAILURE;
          }
          break;
        case S_SCHEME:
          if (c !== undefined && (isAlpha(c) || isDigit(c) || c === "+" || c === "-" || c === ".")) {
            buffer += c.toLowerCase();
          } else if (c === ":") {
            if (stateOverride) {
              if (isSpecialScheme(url.scheme) !== isSpecialScheme(buffer)) {
                return undefined;
              }
              if ((hasCredentials(url) || url.port !== null) && buffer === "file") {
                return undefined;
              }
              if (url.scheme === "file" && url.host === "") {
                return undefined;
              }
            }
            url.scheme = buffer;
            if (stateOverride) {
              if (url.port === defaultPort(url.scheme)) {
                url.port = null;
              }
              return url;
            }
            buffer = "";
            if (url.scheme === "file") {
              state = S_FILE;
            } else if (isSpecialScheme(url.scheme) && base !== null && base.scheme === url.scheme) {
              state = S_SPECIAL_RELATIVE_OR_AUTHORITY;
            } else if (isSpecialScheme(url.scheme)) {
              state = S_SPECIAL_AUTHORITY_SLASHES;
            } else if (cps[p + 1] === "/") {
              state = S_PATH_OR_AUTHORITY;
              p++;
            } else {
              url.path = "";
              state = S_OPAQUE_PATH;
            }
          } else if (!stateOverride) {
            buffer = "";
            state = S_NO_SCHEME;
            p = -1;
          } else {
            return FAILURE;
          }
          break;
        case S_SCHEME_START:
          if (isAlpha(c)) {
            buffer += c.toLowerCase();
            state = S_SCHEME;
          } else if (!stateOverride) {
            state = S_NO_SCHEME;
            p--;
          } else {
            return FAILURE;
          }
          break;
        case S_NO_SCHEME:
          if (base === null || (typeof base.path === "string" && c !== "#")) {
            return FAILURE;
          } else if (typeof base.path === "string" && c === "#") {
            url.scheme = base.scheme;
            url.path = base.path;
            url.query = base.query;
            url.fragment = "";
            state = S_FRAGMENT;
          } else if (base.scheme !== "file") {
            state = S_RELATIVE;
            p--;
          } else {
            state = S_FILE;
            p--;
          }
          break;
        case S_SPECIAL_RELATIVE_OR_AUTHORITY:
          if (c === "/" && cps[p + 1] === "/") {
            state = S_SPECIAL_AUTHORITY_IGNORE_SLASHES;
            p++;
          } else {
            state = S_RELATIVE;
            p--;
          }
          break;
        case S_PATH_OR_AUTHORITY:
          if (c === "/") {
            state = S_AUTHORITY;
          } else {
            state = S_PATH;
            p--;
          }
          break;
        case S_RELATIVE:
          url.scheme = base.scheme;
          scheme = url.scheme;
          special = isSpecialScheme(scheme);
          if (c === "/" || (special && c === "\\")) {
            state = S_RELATIVE_SLASH;
          } else {
            copyAuthority(url, base);
            url.path = base.path.slice();
            url.query = base.query;
            if (c === "?") {
              url.query = "";
              state = S_QUERY;
            } else if (c === "#") {
              url.fragment = "";
              state = S_FRAGMENT;
            } else if (c !== undefined) {
              url.query = null;
              shortenPath(url);
              state = S_PATH;
              p--;
            }
          }
          break;
        case S_RELATIVE_SLASH:
          if (special && (c === "/" || c === "\\")) {
            state = S_SPECIAL_AUTHORITY_IGNORE_SLASHES;
          } else if (c === "/") {
            state = S_AUTHORITY;
          } else {
            copyAuthority(url, base);
            state = S_PATH;
            p--;
          }
          break;
        case S_SPECIAL_AUTHORITY_SLASHES:
          if (c === "/" && cps[p + 1] === "/") {
            state = S_SPECIAL_AUTHORITY_IGNORE_SLASHES;
            p++;
          } else {
            state = S_SPECIAL_AUTHORITY_IGNORE_SLASHES;
            p--;
          }
          break;
        case S_SPECIAL_AUTHORITY_IGNORE_SLASHES:
          if (c !== "/" && c !== "\\") {
            state = S_AUTHORITY;
            p--;
          }
          break;
        case S_FILE:
          url.scheme = "file";
          url.host = "";
          if (c === "/" || c === "\\") {
            state = S_FILE_SLASH;
          } else if (base !== null && base.scheme === "file") {
            url.host = base.host;
            url.path = base.path.slice();
            url.query = base.query;
            if (c === "?") {
              url.query = "";
              state = S_QUERY;
            } else if (c === "#") {
              url.fragment = "";
              state = S_FRAGMENT;
            } else if (c !== undefined) {
              url.query = null;
              if (!startsWithDriveLetter(cps, p)) {
                shortenPath(url);
              } else {
                url.path = [];
              }
              state = S_PATH;
              p--;
            }
          } else {
            state = S_PATH;
            p--;
          }
          break;
        case S_FILE_SLASH:
          if (c === "/" || c === "\\") {
            state = S_FILE_HOST;
          } else {
            if (base !== null && base.scheme === "file") {
              url.host = base.host;
              if (!startsWithDriveLetter(cps, p) && typeof base.path !== "string" && base.path.length > 0 && isWindowsDriveLetter(base.path[0], true)) {
                url.path.push(base.path[0]);
              }
            }
            state = S_PATH;
            p--;
          }
          break;
        case S_FILE_HOST:
          if (endsAuthority(c, true)) {
            p--;
            if (!stateOverride && isWindowsDriveLetter(buffer, false)) {
              state = S_PATH;
            } else if (buffer === "") {
              url.host = "";
              if (stateOverride) {
                return url;
              }
              state = S_PATH_START;
            } else {
              let host = parseHost(buffer, special);
              if (host === null) {
                return FAILURE;
              }
              if (host === "localhost") {
                host = "";
              }
              url.host = host;
              if (stateOverride) {
                return url;
              }
              buffer = "";
              state = S_PATH_START;
            }
          } else {
            buffer += c;
          }
          break;
        case S_PATH_START:
          if (special) {
            state = S_PATH;
            if (c !== "/" && c !== "\\") {
              p--;
            }
          } else if (!stateOverride && c === "?") {
            url.query = "";
            state = S_QUERY;
          } else if (!stateOverride && c === "#") {
            url.fragment = "";
            state = S_FRAGMENT;
          } else if (c !== undefined) {
            state = S_PATH;
            if (c !== "/") {
              p--;
            }
          } else if (stateOverride && url.host === null) {
            url.path.push("");
          }
          break;
      }
      if (p >= cps.length) {
        return url;
      }
    }
  }

  function serializePath(url) {
    if (typeof url.path === "string") {
      return url.path;
    }
    let out = "";
    for (const segment of url.path) {
      out += "/" + segment;
    }
    return out;
  }

  function serializeURL(url, excludeFragment) {
    let out = url.scheme + ":";
    if (url.host !== null) {
      out += "//";
      if (hasCredentials(url)) {
        out += url.username + (url.password !== "" ? ":" + url.password : "") + "@";
      }
      out += serializeHost(url.host);
      if (url.port !== null) {
        out += ":" + url.port;
      }
    } else if (typeof url.path !== "string" && url.path.length > 1 && url.path[0] === "") {
      out += "/.";
    }
    out += serializePath(url);
    if (url.query !== null) {
      out += "?" + url.query;
    }
    if (!excludeFragment && url.fragment !== null) {
      out += "#" + url.fragment;
    }
    return out;
  }

  function serializeOrigin(url) {
    if (url.scheme === "blob") {
      const inner = parseURL(serializePath(url), null);
      return inner !== FAILURE && (inner.scheme === "http" || inner.scheme === "https") ? serializeOrigin(inner) : "null";
    }
    if (url.scheme === "file" || !isSpecialScheme(url.scheme)) {
      return "null";
    }
    return url.scheme + "://" + serializeHost(url.host) + (url.port === null ? "" : ":" + url.port);
  }

  // ---- application/x-www-form-urlencoded ----

  function parseForm(input) {
    const list = [];
    for (const sequence of input.split("&")) {
      if (sequence === "") {
        continue;
      }
      const at = sequence.indexOf("=");
      const name = at === -1 ? sequence : sequence.slice(0, at);
      const value = at === -1 ? "" : sequence.slice(at + 1);
      list.push([percentDecode(name.replace(PLUSES, " ")), percentDecode(value.replace(PLUSES, " "))]);
    }
    return list;
  }
  function serializeForm(list) {
    let out = "";
    for (let i = 0; i < list.length; i++) {
      out += (i > 0 ? "&" : "") + encodeString(list[i][0], FORM_SET, true) + "=" + encodeString(list[i][1], FORM_SET, true);
    }
    return out;
  }

  // The links between a URL and its URLSearchParams, set by the classes' static blocks: a
  // URLSearchParams's list (replaced), the URL it updates, and that update.
  let setParamsList;
  let attachParams;
  let updateQuery;

  function invalidURL(input) {
    const error = new TypeErrorCtor("Invalid URL: " + input);
    defineProperty(error, "code", { value: "ERR_INVALID_URL", writable: true, configurable: true });
    return error;
  }

  // The record of `base` (a URL, a string or undefined): null, or FAILURE.
  function baseRecord(base) {
    if (base === undefined) {
      return null;
    }
    return parseURL(toUSVString(base), null);
  }

  class URL {
    #url;
    #query;

    constructor(url, base) {
      const input = toUSVString(url);
      const baseURL = baseRecord(base);
      const parsed = baseURL === FAILURE ? FAILURE : parseURL(input, baseURL);
      if (parsed === FAILURE) {
        throw invalidURL(input);
      }
      this.#url = parsed;
      this.#query = new URLSearchParams();
      setParamsList(this.#query, parseForm(parsed.query || ""));
      attachParams(this.#query, this);
    }

    static canParse(url, base) {
      const baseURL = baseRecord(base);
      return baseURL !== FAILURE && parseURL(toUSVString(url), baseURL) !== FAILURE;
    }

    static parse(url, base) {
      try {
        return new URL(url, base);
      } catch {
        return null;
      }
    }

    static {
      // The search params' update steps.
      updateQuery = (self, list) => {
        const serialized = serializeForm(list);
        self.#url.query = serialized === "" ? null : serialized;
      };
    }

    get href() {
      return serializeURL(this.#url, false);
    }
    set href(value) {
      const input = toUSVString(value);
      const parsed = parseURL(input, null);
      if (parsed === FAILURE) {
        throw invalidURL(input);
      }
      this.#url = parsed;
      setParamsList(this.#query, parseForm(parsed.query || ""));
    }
    toString() {
      return this.href;
    }
    toJSON() {
      return this.href;
    }

    get origin() {
      return serializeOrigin(this.#url);
    }

    get protocol() {
      return this.#url.scheme + ":";
    }
    set protocol(value) {
      this.#set(String(value) + ":", S_SCHEME_START);
    }

    get username() {
      return this.#url.username;
    }
    set username(value) {
      if (!cannotHaveCredentialsOrPort(this.#url)) {
        this.#url.username = encodeString(toUSVString(value), USERINFO_SET, false);
      }
    }

    get password() {
      return this.#url.password;
    }
    set password(value) {
      if (!cannotHaveCredentialsOrPort(this.#url)) {
        this.#url.password = encodeString(toUSVString(value), USERINFO_SET, false);
      }
    }

    get host() {
      const url = this.#url;
      if (url.host === null) {
        return "";
      }
      return serializeHost(url.host) + (url.port === null ? "" : ":" + url.port);
    }
    set host(value) {
      if (typeof this.#url.path !== "string") {
        this.#set(String(value), S_HOST);
      }
    }

    get hostname() {
      return this.#url.host === null ? "" : serializeHost(this.#url.host);
    }
    set hostname(value) {
      if (typeof this.#url.path !== "string") {
        this.#set(String(value), S_HOSTNAME);
      }
    }

    get port() {
      return this.#url.port === null ? "" : String(this.#url.port);
    }
    set port(value) {
      if (cannotHaveCredentialsOrPort(this.#url)) {
        return;
      }
      const input = String(value);
      if (input === "") {
        this.#url.port = null;
      } else {
        this.#set(input, S_PORT);
      }
    }

    get pathname() {
      return serializePath(this.#url);
    }
    set pathname(value) {
      if (typeof this.#url.path !== "string") {
        this.#url.path = [];
        this.#set(String(value), S_PATH_START);
      }
    }

    get search() {
      const query = this.#url.query;
      return query === null || query === "" ? "" : "?" + query;
    }
    set search(value) {
      const input = toUSVString(value);
      if (input === "") {
        this.#url.query = null;
        setParamsList(this.#query, []);
        return;
      }
      const query = input[0] === "?" ? input.slice(1) : input;
      this.#url.query = "";
      this.#set(query, S_QUERY);
      setParamsList(this.#query, parseForm(query));
    }

    get searchParams() {
      return this.#query;
    }

    get hash() {
      const fragment = this.#url.fragment;
      return fragment === null || fragment === "" ? "" : "#" + fragment;
    }
    set hash(value) {
      const input = toUSVString(value);
      if (input === "") {
        this.#url.fragment = null;
        return;
      }
      this.#url.fragment = "";
      this.#set(input[0] === "#" ? input.slice(1) : input, S_FRAGMENT);
    }

    // Runs the parser on this URL's record from `state`, as the setters do: what it parsed
    // before it met something invalid stays set.
    #set(input, state) {
      parseURL(toUSVString(input), null, this.#url, state);
    }
  }
  defineProperty(URL.prototype, Symbol.toStringTag, { value: "URL", configurable: true });

  // Whether a [name, value] pair has `name`, and `value` unless that is undefined (delete's and
  // has's test).
  function pairMatcher(name, value) {
    const key = toUSVString(name);
    const only = value === undefined ? undefined : toUSVString(value);
    return ([n, v]) => n === key && (only === undefined || v === only);
  }

  class URLSearchParams {
    #list = [];
    #url = null;

    static {
      setParamsList = (params, list) => {
        params.#list = list;
      };
      attachParams = (params, url) => {
        params.#url = url;
      };
    }

    constructor(init) {
      const list = this.#list;
      if (init === undefined || init === null) {
        return;
      }
      if (typeof init === "object" || typeof init === "function") {
        const iterator = init[Symbol.iterator];
        if (iterator !== undefined && iterator !== null) {
          if (typeof iterator !== "function") {
            throw new TypeErrorCtor("URLSearchParams: the init's Symbol.iterator must be a function");
          }
          for (const pair of init) {
            if (pair === null || (typeof pair !== "object" && typeof pair !== "function")) {
              throw new TypeErrorCtor("URLSearchParams: each pair must be a sequence of a name and a value");
            }
            const items = Array.from(pair);
            if (items.length !== 2) {
              throw new TypeErrorCtor("URLSearchParams: each pair must have exactly two items, got " + items.length);
            }
            list.push([toUSVString(items[0]), toUSVString(items[1])]);
          }
          return;
        }
        for (const key of Reflect.ownKeys(init)) {
          if (typeof key !== "string") {
            continue;
          }
          const descriptor = Object.getOwnPropertyDescriptor(init, key);
          if (descriptor !== undefined && descriptor.enumerable) {
            list.push([toUSVString(key), toUSVString(init[key])]);
          }
        }
        return;
      }
      const text = toUSVString(init);
      this.#list = parseForm(text[0] === "?" ? text.slice(1) : text);
    }

    #update() {
      if (this.#url !== null) {
        updateQuery(this.#url, this.#list);
      }
    }

    get size() {
      return this.#list.length;
    }
    append(name, value) {
      this.#list.push([toUSVString(name), toUSVString(value)]);
      this.#update();
    }
    delete(name, value) {
      const matches = pairMatcher(name, value);
      this.#list = this.#list.filter((pair) => !matches(pair));
      this.#update();
    }
    get(name) {
      const key = toUSVString(name);
      const found = this.#list.find(([n]) => n === key);
      return found === undefined ? null : found[1];
    }
    getAll(name) {
      const key = toUSVString(name);
      return this.#list.filter(([n]) => n === key).map(([, v]) => v);
    }
    has(name, value) {
      return this.#list.some(pairMatcher(name, value));
    }
    set(name, value) {
      const key = toUSVString(name);
      const text = toUSVString(value);
      const at = this.#list.findIndex(([n]) => n === key);
      if (at === -1) {
        this.#list.push([key, text]);
      } else {
        this.#list[at][1] = text;
        this.#list = this.#list.filter(([n], i) => i <= at || n !== key);
      }
      this.#update();
    }
    sort() {
      // Stable, by UTF-16 code units of the names.
      this.#list = this.#list
        .map((pair, i) => [pair, i])
        .sort(([a, i], [b, j]) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : i - j))
        .map(([pair]) => pair);
      this.#update();
    }
    forEach(callback, thisArg) {
      if (typeof callback !== "function") {
        throw new TypeErrorCtor("URLSearchParams.forEach: the callback must be a function");
      }
      const list = this.#list;
      for (let i = 0; i < list.length; i++) {
        call(callback, thisArg, list[i][1], list[i][0], this);
      }
    }
    *entries() {
      // Live, as in browsers: a pair added or removed while iterating is seen.
      for (let i = 0; i < this.#list.length; i++) {
        yield [this.#list[i][0], this.#list[i][1]];
      }
    }
    *keys() {
      for (const [name] of this.entries()) {
        yield name;
      }
    }
    *values() {
      for (const [, value] of this.entries()) {
        yield value;
      }
    }
    [Symbol.iterator]() {
      return this.entries();
    }
    toString() {
      return serializeForm(this.#list);
    }
  }
  defineProperty(URLSearchParams.prototype, Symbol.toStringTag, { value: "URLSearchParams", configurable: true });
  // Neither may be cloned, as in browsers (a copy would silently lose everything in them).
  BRANDS.push(["URL", getter(URL.prototype, "href")], ["URLSearchParams", getter(URLSearchParams.prototype, "size")]);
  UNCLONABLE.URL = "a URL";
  UNCLONABLE.URLSearchParams = "a URLSearchParams";

  // Each value goes to the prelude's accessor for its name (which keeps what the graph assigned).
  host.install("DOMException", DOMException);
  host.install("performance", performance);
  host.install("crypto", Object.freeze({ getRandomValues, randomUUID }));
  host.install("structuredClone", structuredClone);
  host.install("queueMicrotask", queueMicrotask);
  host.install("TextEncoder", TextEncoder);
  host.install("TextDecoder", TextDecoder);
  host.install("atob", atob);
  host.install("btoa", btoa);
  host.install("URL", URL);
  host.install("URLSearchParams", URLSearchParams);
})
