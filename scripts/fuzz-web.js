#!/usr/bin/env node
// Differential fuzzing of runner/js/src/web.js against Node's own implementations: TextDecoder
// (random bytes near the UTF-8 boundaries, split across a streaming call, fatal and ignoreBOM),
// TextEncoder and encodeInto, atob, btoa, and structuredClone of random object graphs (shared
// and circular references, Map, Set, Date, RegExp, buffers and views, errors, wrappers, holes).
// web.js runs in a fresh `vm` context, which has only the ECMAScript built-ins, as in boa.
//
//   node scripts/fuzz-web.js [CASES]      (default 20000; prints mismatches, exits 1 on any)
"use strict";
const vm = require("vm");
const fs = require("fs");
const path = require("path");
const CASES = Number(process.argv[2] || 20000);
const web = fs.readFileSync(path.join(__dirname, "..", "runner", "js", "src", "web.js"), "utf8");
const ctx = vm.createContext({});
// The prelude's placeholders, which web.js replaces.
vm.runInContext(
  `for (const n of ["DOMException", "TextDecoder", "TextEncoder", "atob", "btoa", "crypto", "performance", "queueMicrotask", "structuredClone"])
     Object.defineProperty(globalThis, n, { get() { return undefined; }, configurable: true });`,
  ctx,
);
const randomBytes = (n) => new (vm.runInContext("Uint8Array", ctx))(require("crypto").randomBytes(n));
const runCallback = (what, callback, args) => callback(...args);
vm.runInContext(web, ctx)({ log: (m) => console.log("log:", m), randomBytes, runCallback });
const W = vm.runInContext("({TextDecoder, TextEncoder, atob, btoa, Uint8Array, structuredClone})", ctx);
let seed = 12345;
const rnd = (n) => {
  seed = (seed * 1103515245 + 12345) & 0x7fffffff;
  return seed % n;
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
console.log(bad === 0 ? "no mismatches" : bad + " mismatches");
process.exit(bad === 0 ? 0 : 1);
