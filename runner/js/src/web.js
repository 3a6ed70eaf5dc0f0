// The functions that scripts written for browsers or Node take for granted and ECMAScript lacks:
// structuredClone, queueMicrotask, TextEncoder, TextDecoder, atob, btoa, crypto.getRandomValues,
// crypto.randomUUID, performance.now, DOMException, URL and URLSearchParams, shared unchanged by
// both engines, so they behave the same in each. The classes and their argument handling are
// here; URL parsing and its setters, form encoding, UTF-8 and base64 are pure natives in Rust
// (src/web.rs: the url crate, std and base64). None of them reaches the host, except that
// queueMicrotask logs a failing callback (through the prelude's runCallback); crypto takes its
// bytes from the run's random source (the host's random-bytes), as Math.random does. `host` is
// {log, randomBytes, monotonicNow, runCallback, install}, from the prelude; `native` is
// web.rs's {utf8Encode, utf8EncodeInto, utf8Decode, base64Encode, base64Decode, urlParse,
// urlPart, urlSet, formParse, formSerialize}.
//
// Compiled when a graph first touches one of these globals (see the prelude), so the built-ins
// captured below are the ones the graph left by then; the functions are not a security
// boundary (nothing here is).
(function (host, native) {
  "use strict";
  const ObjectPrototype = Object.prototype;
  const getPrototypeOf = Object.getPrototypeOf;
  const setPrototypeOf = Object.setPrototypeOf;
  const defineProperty = Object.defineProperty;
  const ownKeys = Object.keys;
  const isArray = Array.isArray;
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

  // The bytes of any buffer source as a Uint8Array over them (not a copy), for the natives.
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

  class TextEncoder {
    get encoding() {
      return "utf-8";
    }
    encode(input) {
      return native.utf8Encode(input === undefined ? "" : String(input));
    }
    encodeInto(source, destination) {
      if (call(typedArrayName, destination) !== "Uint8Array") {
        throw new TypeErrorCtor("TextEncoder.encodeInto: the destination must be a Uint8Array");
      }
      const [read, written] = native.utf8EncodeInto(String(source), destination);
      return { read, written };
    }
  }

  const UTF8_LABELS = ["unicode-1-1-utf-8", "unicode11utf8", "unicode20utf8", "utf-8", "utf8", "x-unicode20utf8"];
  const decoders = new WeakMap();

  class TextDecoder {
    constructor(label, options) {
      const name = label === undefined ? "utf-8" : String(label).trim().toLowerCase();
      if (!UTF8_LABELS.includes(name)) {
        throw new RangeErrorCtor(
          'TextDecoder: the encoding "' + String(label) + '" is not supported; only UTF-8 is',
        );
      }
      const opts = options === undefined || options === null ? {} : options;
      // The options, and between calls with {stream: true} the bytes of an unfinished
      // character and whether the BOM's place has been passed.
      const d = { fatal: !!opts.fatal, ignoreBOM: !!opts.ignoreBOM, held: null, bomSeen: false };
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
      const decoded = native.utf8Decode(d.held, bytes, stream, d.fatal);
      if (decoded === null) {
        d.held = null;
        d.bomSeen = false;
        throw new TypeErrorCtor("TextDecoder.decode: the data is not valid UTF-8");
      }
      let [text, held] = decoded;
      if (!d.bomSeen && text !== "") {
        d.bomSeen = true;
        if (!d.ignoreBOM && text.charCodeAt(0) === 0xfeff) {
          text = text.slice(1);
        }
      }
      // A call without {stream: true} ends the stream: the next starts afresh.
      d.held = stream ? held : null;
      d.bomSeen = stream && d.bomSeen;
      return text;
    }
  }

  function state(decoder) {
    const d = call(weakMapGet, decoders, decoder);
    if (d === undefined) {
      throw new TypeErrorCtor("TextDecoder: not a TextDecoder");
    }
    return d;
  }

  // ---- atob and btoa (forgiving base64, as in the HTML standard) --------------------------

  function btoa(data) {
    if (arguments.length === 0) {
      throw new TypeErrorCtor("btoa: 1 argument required, but only 0 present");
    }
    const encoded = native.base64Encode(String(data));
    if (encoded === null) {
      throw new DOMException(
        "btoa: the string has a character outside Latin-1; encode it first, e.g. with TextEncoder",
        "InvalidCharacterError",
      );
    }
    return encoded;
  }

  function atob(data) {
    if (arguments.length === 0) {
      throw new TypeErrorCtor("atob: 1 argument required, but only 0 present");
    }
    const decoded = native.base64Decode(String(data));
    if (decoded === null) {
      throw new DOMException("atob: the string is not valid base64", "InvalidCharacterError");
    }
    return decoded;
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

  // A URL's record is the natives' (the url crate's parser, host parser and setters); here are
  // only the classes. The natives number the attributes as ATTRIBUTES does; 10 is the origin,
  // 11 the query itself (URLSearchParams reads and replaces it).
  const ATTRIBUTES = ["href", "protocol", "username", "password", "host", "hostname", "port", "pathname", "search", "hash"];
  const ORIGIN = 10;
  const QUERY = 11;
  const toWellFormed = String.prototype.toWellFormed;
  function toUSVString(value) {
    return call(toWellFormed, String(value));
  }

  // The links between a URL and its URLSearchParams, set by the classes' static blocks: a URL's
  // record (which throws unless `this` is a URL), a URLSearchParams's list (replaced), and the
  // URL record it updates.
  let recordOf;
  let setParamsList;
  let attachParams;

  function invalidURL(input) {
    const error = new TypeErrorCtor("Invalid URL: " + input);
    defineProperty(error, "code", { value: "ERR_INVALID_URL", writable: true, configurable: true });
    return error;
  }

  function parseURL(url, base) {
    const input = toUSVString(url);
    return [input, native.urlParse(input, base === undefined ? undefined : toUSVString(base))];
  }

  class URL {
    #url;
    #query;

    constructor(url, base) {
      const [input, record] = parseURL(url, base);
      if (record === null) {
        throw invalidURL(input);
      }
      this.#url = record;
      this.#query = new URLSearchParams();
      attachParams(this.#query, record);
      this.#readQuery();
    }

    static canParse(url, base) {
      return parseURL(url, base)[1] !== null;
    }

    static parse(url, base) {
      try {
        return new URL(url, base);
      } catch {
        return null;
      }
    }

    static {
      recordOf = (self) => self.#url;
    }

    #readQuery() {
      setParamsList(this.#query, native.formParse(native.urlPart(this.#url, QUERY)));
    }

    set href(value) {
      const input = toUSVString(value);
      if (!native.urlSet(this.#url, 0, input)) {
        throw invalidURL(input);
      }
      this.#readQuery();
    }
    set search(value) {
      // The list is parsed from the value as given (the URL's query has tabs and newlines
      // removed), as the standard says.
      const input = toUSVString(value);
      native.urlSet(this.#url, ATTRIBUTES.indexOf("search"), input);
      setParamsList(this.#query, input === "" ? [] : native.formParse(input[0] === "?" ? input.slice(1) : input));
    }
    toString() {
      return this.href;
    }
    toJSON() {
      return this.href;
    }
    get origin() {
      return native.urlPart(this.#url, ORIGIN);
    }
    get searchParams() {
      return this.#query;
    }
  }
  // Every other attribute is the record's, read and set by the natives as the standard says.
  for (let i = 0; i < ATTRIBUTES.length; i++) {
    const name = ATTRIBUTES[i];
    const own = Object.getOwnPropertyDescriptor(URL.prototype, name);
    defineProperty(URL.prototype, name, {
      get() {
        return native.urlPart(recordOf(this), i);
      },
      // The href and search setters replace the query, and the search params follow.
      set: own !== undefined ? own.set : function (value) {
        native.urlSet(recordOf(this), i, value);
      },
      enumerable: false,
      configurable: true,
    });
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
      attachParams = (params, record) => {
        params.#url = record;
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
      this.#list = native.formParse(text[0] === "?" ? text.slice(1) : text);
    }

    #update() {
      if (this.#url !== null) {
        native.urlSet(this.#url, QUERY, native.formSerialize(this.#list));
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
      return native.formSerialize(this.#list);
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
