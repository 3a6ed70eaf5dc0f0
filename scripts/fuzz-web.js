#!/usr/bin/env node
// Differential fuzzing of runner/js/src/web.js against Node's own implementations: TextDecoder
// (random bytes near the UTF-8 boundaries, split across a streaming call, fatal and ignoreBOM),
// TextEncoder and encodeInto, atob, btoa, and structuredClone of random object graphs (shared
// and circular references, Map, Set, Date, RegExp, buffers and views, errors, wrappers, holes),
// URL (random inputs, bases and setters) and URLSearchParams (random inits and methods).
// web.js runs in a fresh `vm` context, which has only the ECMAScript built-ins, as in boa.
//
//   node scripts/fuzz-web.js [CASES]      (default 20000; prints mismatches, exits 1 on any)
//   FUZZ_SEED=N node scripts/fuzz-web.js  (another sequence of cases; the default seed is 12345)
"use strict";
const vm = require("vm");
const fs = require("fs");
const path = require("path");
const CASES = Number(process.argv[2] || 20000);
const web = fs.readFileSync(path.join(__dirname, "..", "runner", "js", "src", "web.js"), "utf8");
const ctx = vm.createContext({});
const randomBytes = (n) => new (vm.runInContext("Uint8Array", ctx))(require("crypto").randomBytes(n));
const runCallback = (what, callback, args) => callback(...args);
// The native behind URL's international domain names: the UTS #46 implementation whatwg-url
// uses (tr46) when it is installed, else Node's own.
let domainToAscii = (domain) => require("url").domainToASCII(domain) || null;
try {
  const tr46 = require("tr46");
  domainToAscii = (domain) =>
    tr46.toASCII(domain, { checkHyphens: false, checkBidi: true, checkJoiners: true, useSTD3ASCIIRules: false, transitionalProcessing: false, verifyDNSLength: false, ignoreInvalidPunycode: false });
} catch {}
// The prelude's accessors become plain properties here.
const contextGlobal = vm.runInContext("globalThis", ctx);
const install = (name, value) => Object.defineProperty(contextGlobal, name, { value, writable: true, configurable: true });
vm.runInContext(web, ctx)({ log: (m) => console.log("log:", m), randomBytes, domainToAscii, runCallback, install });
const W = vm.runInContext("({TextDecoder, TextEncoder, atob, btoa, Uint8Array, structuredClone, URL, URLSearchParams})", ctx);
// mulberry32: every bit is usable (the low bits of a plain LCG repeat in short cycles).
let seed = Number(process.env.FUZZ_SEED || 12345) >>> 0;
const rnd = (n) => {
  seed = (seed + 0x6d2b79f5) >>> 0;
  let t = seed;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return (((t ^ (t >>> 14)) >>> 0) / 4294967296) * n | 0;
};
let bad = 0;
function mismatch(...what) {
  if (bad++ < 20) console.log("MISMATCH", ...what);
}
// TextDecoder on random bytes, biased to UTF-8 lead/continuation bytes, with and without streaming splits
const interesting = [0x00, 0x41, 0x7f, 0x80, 0xbf, 0xc0, 0xc1, 0xc2, 0xdf, 0xe0, 0xed, 0xef, 0xf0, 0xf4, 0xf5, 0xff, 0x90, 0xa0, 0x8f, 0x9f, 0xef, 0xbb];
for (let t = 0; t < CASES; t++) {
  const n = rnd(12);
  const bytes = new Uint8Array(n);
  for (let i = 0; i < n; i++) bytes[i] = rnd(3) ? interesting[rnd(interesting.length)] : rnd(256);
  const fatal = rnd(4) === 0, ignoreBOM = rnd(2) === 0;
  const cut = rnd(n + 1);
  const run = (TD, U8) => {
    try {
      const d = new TD("utf-8", { fatal, ignoreBOM });
      return d.decode(U8.from(bytes.slice(0, cut)), { stream: true }) + d.decode(U8.from(bytes.slice(cut)));
    } catch (e) {
      return "ERR " + e.name;
    }
  };
  const mine = run(W.TextDecoder, W.Uint8Array), theirs = run(TextDecoder, Uint8Array);
  if (mine !== theirs) mismatch("decode", [...bytes].map((b) => b.toString(16)), cut, fatal, ignoreBOM, JSON.stringify(mine), JSON.stringify(theirs));
}
// TextEncoder on random UTF-16
for (let t = 0; t < CASES; t++) {
  let s = ""; const n = rnd(8);
  const units = [0x41, 0x7f, 0x80, 0x7ff, 0x800, 0xd7ff, 0xd800, 0xdbff, 0xdc00, 0xdfff, 0xe000, 0xfeff, 0xffff];
  for (let i = 0; i < n; i++) s += String.fromCharCode(rnd(2) ? units[rnd(units.length)] : rnd(65536));
  const mine = [...new W.TextEncoder().encode(s)].join(), theirs = [...new TextEncoder().encode(s)].join();
  if (mine !== theirs) { mismatch("encode", JSON.stringify(s), mine, theirs); }
  const size = rnd(10);
  const a = new W.Uint8Array(size), b = new Uint8Array(size);
  const r1 = new W.TextEncoder().encodeInto(s, a), r2 = new TextEncoder().encodeInto(s, b);
  if (r1.read !== r2.read || r1.written !== r2.written || [...a].join() !== [...b].join()) { mismatch("encodeInto", JSON.stringify(s), size, r1, r2); }
}
// atob/btoa
const alpha = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/= \t\n\f\r$-_";
for (let t = 0; t < CASES; t++) {
  let s = ""; const n = rnd(10);
  for (let i = 0; i < n; i++) s += alpha[rnd(alpha.length)];
  const f = (fn, text) => { try { return fn(text); } catch (e) { return "ERR " + e.name; } };
  if (f(W.atob, s) !== f(atob, s)) mismatch("atob", JSON.stringify(s), f(W.atob, s), f(atob, s));
  let b = ""; for (let i = 0; i < n; i++) b += String.fromCharCode(rnd(3) ? rnd(256) : rnd(300));
  if (f(W.btoa, b) !== f(btoa, b)) mismatch("btoa", JSON.stringify(b), f(W.btoa, b), f(btoa, b));
}
const gen = vm.runInContext(`(function gen(seed) {
  const rnd = (n) => { seed = (seed * 1103515245 + 12345) & 0x7fffffff; return seed % n; };
  const pool = [];
  function value(depth) {
    if (pool.length && rnd(6) === 0) return pool[rnd(pool.length)];
    const k = depth > 3 ? rnd(6) : rnd(18);
    switch (k) {
      case 0: return rnd(100) - 50;
      case 1: return ["a", "", "__proto__", "x y"][rnd(4)];
      case 2: return [undefined, null, true, NaN, -0, 10n][rnd(6)];
      case 3: return new Date(rnd(1e6));
      case 4: return /ab+c/gi;
      case 5: return [new Boolean(true), new Number(3), new String("w")][rnd(3)];
      case 6: case 7: { const o = {}; pool.push(o); const n = rnd(4); for (let i = 0; i < n; i++) o[["k", "__proto__", "1", "z"][rnd(4)] + (rnd(2) ? "" : i)] = value(depth + 1); return o; }
      case 8: case 9: { const a = new Array(rnd(4)); pool.push(a); for (let i = 0; i < a.length; i++) if (rnd(3)) a[i] = value(depth + 1); if (rnd(4) === 0) a.extra = value(depth + 1); return a; }
      case 10: { const m = new Map(); pool.push(m); const n = rnd(3); for (let i = 0; i < n; i++) m.set(value(depth + 1), value(depth + 1)); return m; }
      case 11: { const s = new Set(); pool.push(s); const n = rnd(3); for (let i = 0; i < n; i++) s.add(value(depth + 1)); return s; }
      case 12: { const b = new ArrayBuffer(8); new Uint8Array(b).set([1,2,3,4,5,6,7,8]); const v = [new Uint8Array(b, 2, 3), new DataView(b, 1, 4), new Int16Array(b), b][rnd(4)]; return v; }
      case 13: { const e = [new Error("m"), new TypeError("t"), new RangeError(), Object.assign(new Error("c"), {name: "Custom"})][rnd(4)]; return e; }
      case 14: { class P { constructor() { this.q = 1; } } return new P(); }
      case 15: { const o = Object.create(null); o.n = value(depth + 1); return o; }
      default: return rnd(2) ? "s" : 1.5;
    }
  }
  return value(0);
})`, ctx);
const mineClone = vm.runInContext("structuredClone", ctx);
function dump(v) {
  const ids = new Map(); let next = 0;
  function d(v) {
    if (typeof v === "bigint") return v + "n";
    if (Object.is(v, -0)) return "-0";
    if (typeof v === "number" && isNaN(v)) return "NaN";
    if (v === undefined) return "undef";
    if (v === null || typeof v !== "object") return JSON.stringify(v);
    if (ids.has(v)) return "#" + ids.get(v);
    const id = next++; ids.set(v, id);
    const tag = Object.prototype.toString.call(v);
    const proto = Object.getPrototypeOf(v);
    const pname = proto === null ? "null" : (proto.constructor && proto.constructor.name);
    let body = "";
    if (tag === "[object Map]") body = [...v].map(([a, b]) => d(a) + "=>" + d(b)).join(",");
    else if (tag === "[object Set]") body = [...v].map(d).join(",");
    else if (tag === "[object Date]") body = v.getTime();
    else if (tag === "[object RegExp]") body = v.source + "/" + v.flags;
    else if (ArrayBuffer.isView(v) || v instanceof ArrayBuffer || tag === "[object ArrayBuffer]") body = (v.buffer ? "buf " + d(v.buffer) + " off " + v.byteOffset + " len " + v.byteLength : "bytes " + [...new Uint8Array(v)].join(" "));
    else if (tag === "[object Error]") body = v.name + ":" + (Object.getOwnPropertyDescriptor(v, "message") ? v.message : "<none>");
    else if (["[object Boolean]", "[object Number]", "[object String]"].includes(tag)) body = String(v.valueOf());
    else { body = Object.keys(v).map((k) => JSON.stringify(k) + ":" + d(v[k])).join(",") + (Array.isArray(v) ? " len " + v.length : ""); }
    return "<" + id + " " + tag + " " + pname + " " + body + ">";
  }
  return d(v);
}
for (let t = 0; t < CASES / 4; t++) {
  const v = gen(t + 1);
  let a, b;
  try { a = dump(mineClone(v)); } catch (e) { a = "ERR " + e.name + " " + e.message; }
  try { b = dump(structuredClone(v)); } catch (e) { b = "ERR " + e.name; }
  // constructor names differ only by realm; compare strings
  if (a !== b) mismatch("structuredClone\n mine  ", a, "\n theirs", b);
}
// URL: random strings assembled from the pieces the parser treats specially, with and without a
// base, then a random setter; every attribute of the result is compared.
const URL_FIELDS = ["href", "origin", "protocol", "username", "password", "host", "hostname", "port", "pathname", "search", "hash"];
const URL_PIECES = [
  "http:", "https:", "file:", "ws:", "ftp:", "sc:", "mailto:", "blob:", "HTTP:", "a+b-c.d:", "1x:", "//", "/", "\\", "///", "\\\\",
  "a", "B", "ex.com", "EXAMPLE.org", "user", ":", "@", "pa ss", "%40", "[", "]", "::1", "1:2::3", "::ffff:1.2.3.4", "[::]", "[1:2:3:4:5:6:7:8]",
  "127.0.0.1", "0x7f.1", "0.0.0.0.", "999", "4294967295", "4294967296", "010.0.0.1", "09", "1.2.3.4.5", "foo.0x", "foo.09",
  ":8080", ":80", ":443", ":65536", ":0", ":x", "?", "#", "?a=b&c", "#frag", ".", "..", "%2e", "%2E%2e", ".%2E", "C:", "c|", "d:/",
  "localhost", " ", "\t", "\n", "\u0000", "\u001f", "\u007f", "ä", "ñ.com", "😀", "\ud800", "%", "%zz", "%41", "'", '"', "<", ">",
  "`", "{", "}", "^", "|", "~", "!", "$", "&", "=", "+", ",", ";", "xn--", "-", "_", "*",
];
const pick = (list) => list[rnd(list.length)];
const noise = (n) => {
  let s = "";
  for (let i = rnd(n + 1); i > 0; i--) s += pick(URL_PIECES);
  return s;
};
// Mostly URL-shaped (scheme, slashes, userinfo, host, port, path, query, fragment, each often
// with noise in it), sometimes plain noise.
function randomURL() {
  if (rnd(5) === 0) return noise(6);
  let s = rnd(6) ? pick(["http:", "https:", "file:", "ws:", "wss:", "ftp:", "sc:", "mailto:", "blob:", "HTTP:", "javascript:", "data:"]) : "";
  s += pick(["//", "//", "//", "/", "", "\\\\", "///", "/\\"]);
  if (rnd(4) === 0) s += pick(["user", "u:p", "a b:c%", "", ":", "ä:😀"]) + noise(1) + "@";
  s += pick(["ex.com", "EXAMPLE.org", "a", "127.0.0.1", "0x7f.1", "[::1]", "[1:2::3]", "[::ffff:1.2.3.4]", "999", "foo.09", "localhost", "C:", "ñ.com", "xn--abc", ""]) + noise(1);
  if (rnd(3) === 0) s += ":" + pick(["80", "443", "8080", "", "65536", "0", "x"]);
  for (let i = rnd(4); i > 0; i--) s += pick(["/", "\\\\"]) + pick(["a", ".", "..", "%2e", "%2E%2e", ".%2E", "C:", "c|", "", "ä b", "x%zz"]) + noise(1);
  if (rnd(3) === 0) s += "?" + noise(3);
  if (rnd(3) === 0) s += "#" + noise(3);
  return s;
}
const URL_BASES = [undefined, "http://h.com/a/b?q#f", "file:///C:/dir/f", "sc://host/p/q", "sc:opaque", "https://u:p@h:8443/"];
const URL_SETTERS = ["href", "protocol", "username", "password", "host", "hostname", "port", "pathname", "search", "hash"];
// The oracle for URL and URLSearchParams is whatwg-url, the standard's reference implementation
// (`npm install whatwg-url`, then NODE_PATH=.../node_modules). Node's own classes follow older
// versions of the standard in several corners, so without whatwg-url these cases are skipped.
let ORACLE = null;
try {
  const reference = require("whatwg-url");
  ORACLE = { URL: reference.URL, URLSearchParams: reference.URLSearchParams };
  console.log("URL oracle: whatwg-url " + require("whatwg-url/package.json").version);
} catch {
  console.log("URL and URLSearchParams skipped: whatwg-url is not installed (npm install whatwg-url; NODE_PATH)");
}
function urlOutcome(U, input, base, setter, value) {
  try {
    const u = base === undefined ? new U(input) : new U(input, base);
    if (setter !== undefined) {
      try { u[setter] = value; } catch (e) { return "SET ERR " + e.name; }
    }
    return URL_FIELDS.map((f) => u[f]).join(" | ") + " || " + u.searchParams.toString();
  } catch (e) {
    return "ERR " + e.name;
  }
}
for (let t = 0; ORACLE !== null && t < CASES; t++) {
  const input = randomURL();
  const base = URL_BASES[rnd(URL_BASES.length)];
  const setter = rnd(2) ? URL_SETTERS[rnd(URL_SETTERS.length)] : undefined;
  const value = randomURL();
  if (/[\ud800-\udbff]/.test(input + value) && (input + value).includes("@")) {
    // whatwg-url 16 shifts the userinfo after a character outside the BMP by one code unit.
    continue;
  }
  const mine = urlOutcome(W.URL, input, base, setter, value), theirs = urlOutcome(ORACLE.URL, input, base, setter, value);
  if (mine !== theirs) mismatch("URL", JSON.stringify(input), base, setter, JSON.stringify(value), "\n mine  ", mine, "\n theirs", theirs);
}
// URLSearchParams: parsing, serializing and every method, on random names and values.
const FORM_PIECES = ["a", "b", "=", "&", "+", "%20", "%2", "%zz", "%C3%A4", "%FF", " ", "ä", "😀", "\ud800", "?", "#", "*", "~", "!", "'", "()", ""];
function randomForm() {
  let s = "";
  const n = rnd(7);
  for (let i = 0; i < n; i++) s += FORM_PIECES[rnd(FORM_PIECES.length)];
  return s;
}
function formOutcome(P, init, ops) {
  try {
    const p = new P(init);
    const seen = [];
    for (const [op, a, b] of ops) {
      if (op === "append" || op === "set") p[op](a, b);
      else if (op === "delete" || op === "has") seen.push(String(b === undefined ? p[op](a) : p[op](a, b)));
      else if (op === "get") seen.push(String(p.get(a)));
      else if (op === "getAll") seen.push(p.getAll(a).join(","));
      else if (op === "sort") p.sort();
    }
    return p.toString() + " || " + JSON.stringify([...p]) + " || " + p.size + " || " + seen.join(";");
  } catch (e) {
    return "ERR " + e.name;
  }
}
const FORM_OPS = ["append", "set", "delete", "has", "get", "getAll", "sort"];
for (let t = 0; ORACLE !== null && t < CASES; t++) {
  const kind = rnd(3);
  const init = kind === 0 ? randomForm() : kind === 1 ? [[randomForm(), randomForm()], [randomForm(), randomForm()]] : { [randomForm()]: randomForm(), [randomForm()]: randomForm() };
  const ops = [];
  for (let i = rnd(5); i > 0; i--) ops.push([FORM_OPS[rnd(FORM_OPS.length)], randomForm(), rnd(2) ? randomForm() : undefined]);
  const mine = formOutcome(W.URLSearchParams, kind === 0 ? init : vm.runInContext("(x) => JSON.parse(x)", ctx)(JSON.stringify(init)), ops);
  const theirs = formOutcome(ORACLE.URLSearchParams, init, ops);
  if (mine !== theirs) mismatch("URLSearchParams", JSON.stringify(init), JSON.stringify(ops), "\n mine  ", mine, "\n theirs", theirs);
}
console.log(bad === 0 ? "no mismatches" : bad + " mismatches");
process.exit(bad === 0 ? 0 : 1);
