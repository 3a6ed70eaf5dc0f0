// Types for graph scripts: what a graph exports (`meta` and its default function) and what that
// function receives (`args` and `g`). `runner init NAME` puts this file and a jsconfig.json
// beside a new graph, so an editor completes `g.`; `tsc --noEmit -p .` checks a folder of graphs
// with them. A graph opts in with two JSDoc lines:
//
//   /** @type {GraphMeta} */
//   export const meta = { name: "Research", slug: "research", version: "1.0.0" };
//
//   /** @param {GraphArgs} args @param {G} g */
//   export default async function (args, g) { ... }
//
// The sandbox is neither a browser nor Node: the globals declared at the end are all there is
// besides the ECMAScript built-ins (no fetch, no require, no process). A test keeps `G` in step
// with the prelude that builds `g` (runner/js/src/prelude.js): every member declared, no other.

/** What every graph exports as `meta`; `runner check` validates it. */
interface GraphMeta {
  /** Human-readable name, at most 200 characters. */
  name: string;
  /** The identifier `g.graph(slug)` and the relay use: `[a-z0-9][a-z0-9_-]*`, at most 64 characters. */
  slug: string;
  /** Version text, e.g. `1.0.0`, at most 64 characters. */
  version: string;
  /** What the graph does, at most 2,000 characters. */
  description?: string;
  /** A JSON Schema of the arguments (an object schema). */
  args?: { [key: string]: unknown };
}

/** The arguments of a run: the JSON object given with `runner run --args` or by the caller. */
type GraphArgs = { [key: string]: any };

/** Plain JSON data: what arguments, tool results and a graph's result are made of. */
type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/**
 * Why an operation of `g` did not succeed, in `error.code`:
 * - `budget_exhausted`: the run's token cap is reached (no agent starts; agents already running finish);
 * - `denied`: the approval policy or the person asked refused a tool, or a nested graph is not shared;
 * - `cancelled`: the run was cancelled or hit its deadline;
 * - `not_found`: no tool or graph of that name (the message names the nearest and the known ones);
 * - `invalid`: the call itself is wrong (a bad argument; the message says which);
 * - `failed`: the operation ran and failed (a provider error, a nested graph that threw).
 */
type FailureCode = "budget_exhausted" | "denied" | "cancelled" | "not_found" | "invalid" | "failed";

/** The error a promise of `g` rejects with. `g.retry` does not retry `cancelled`, `budget_exhausted` or `denied`. */
interface GraphFailure extends Error {
  code: FailureCode;
}

/** What `g.agent` takes (a bare string is the prompt). Any other key is refused (`invalid`), naming the nearest one. */
interface AgentOptions {
  /** The user prompt, not empty. */
  prompt: string;
  /** The system prompt. */
  system?: string | null;
  /** The model; the provider's default otherwise. */
  model?: string | null;
  /** A label for the trace and for mock replies (`"label"` in a replies file). */
  label?: string | null;
  /** Most tokens the agent may generate in one turn (the run's cap clips it). */
  maxTokens?: number | null;
  /** Tools offered to the model (each call passes the approval policy). */
  tools?: ToolName[] | null;
  /** Most model turns in a tool loop. */
  maxTurns?: number | null;
}

/** What `g.agent` resolves to. */
interface AgentReply {
  /** The final text. */
  text: string;
  /** Tokens of all its turns. */
  tokens: number;
  /** The label it was given, or null. */
  label: string | null;
  /** The model that answered. */
  model: string;
  /** The cost the provider reported, over all turns. */
  cost: number;
  /** Model turns taken. */
  turns: number;
  /** Why the last turn stopped: `stop`, `length`, ... */
  finish_reason: string;
}

/** One entry of `fs.list`. */
interface FsEntry {
  name: string;
  kind: "file" | "dir" | "symlink" | "other";
}

/** The standard tools' arguments, by name. Paths are relative to the run's `--folder`. */
interface ToolArgs {
  "fs.read": { path: string };
  "fs.write": { path: string; text: string };
  "fs.list": { path: string };
}

/** The standard tools' results, by name. */
interface ToolResults {
  "fs.read": { text: string };
  "fs.write": { bytes: number };
  "fs.list": { entries: FsEntry[]; truncated?: number };
}

/** The standard tools' names. */
type ToolName = keyof ToolArgs;

/** `g.retry`'s options: an object (`g.retry(fn, 5)` is refused); any other key is refused, naming the nearest one. */
interface RetryOptions {
  /** Attempts in all, 1 to 10 (default 3). */
  attempts?: number;
  /** Milliseconds between attempts, 0 to 600,000 (default 0). */
  delayMs?: number;
}

/** The run's token budget, as `g.budget()` reads it. */
interface Budget {
  /** Tokens metered so far over the whole run, nested graphs included. */
  used: number;
  /** The cap, or null when there is none. */
  cap: number | null;
}

/** The `g` a graph receives: every capability it has. Each promise rejects with a {@link GraphFailure}. */
interface G {
  /** Starts an agent and resolves to its reply. Refused with `budget_exhausted` once the cap is reached. */
  agent(options: AgentOptions | string): Promise<AgentReply>;
  /** Calls a tool through the approval policy. An unknown name rejects with `not_found`. */
  tool<N extends ToolName>(name: N, args: ToolArgs[N]): Promise<ToolResults[N]>;
  /** Any other tool the host offers (the standard ones are typed above). */
  tool<N extends string>(name: N extends ToolName ? never : N, args?: { [key: string]: Json }): Promise<Json>;
  /** Runs another graph by slug (from `--graphs`, or those shared with the same project) and resolves to its result. */
  graph(slug: string, args?: { [key: string]: Json }): Promise<any>;
  /** Calls `fn(attempt)` (attempt counts from 1) until it resolves or the attempts are used up, then rejects with the last error. */
  retry<T>(fn: (attempt: number) => T | Promise<T>, options?: RetryOptions): Promise<T>;
  /** Resolves after `ms` milliseconds of the run clock (0 to 600,000). */
  sleep(ms: number): Promise<null>;
  /** Writes one line to the run's trace. */
  log(...parts: unknown[]): void;
  /** The tokens used so far and the cap. */
  budget(): Budget;
}

/** A graph's default export. Its result must become JSON (no BigInt, Map, Set, Promise, function or cycle). Work it leaves running when it returns is cancelled, and its timers never fire. */
type GraphFunction = (args: GraphArgs, g: G) => unknown;

// The globals the sandbox has besides the ECMAScript built-ins. Time and randomness come from
// the run (`--clock`, `--seed`), so a test may fix them.

/** Writes to the run's trace; every method writes one line. */
declare const console: {
  log(...parts: unknown[]): void;
  info(...parts: unknown[]): void;
  warn(...parts: unknown[]): void;
  error(...parts: unknown[]): void;
  debug(...parts: unknown[]): void;
  dir(...parts: unknown[]): void;
  dirxml(...parts: unknown[]): void;
  table(...parts: unknown[]): void;
  trace(...parts: unknown[]): void;
  assert(condition?: unknown, ...parts: unknown[]): void;
  count(label?: string): void;
  countReset(label?: string): void;
  group(...parts: unknown[]): void;
  groupCollapsed(...parts: unknown[]): void;
  groupEnd(): void;
  time(label?: string): void;
  timeLog(label?: string, ...parts: unknown[]): void;
  timeEnd(label?: string): void;
};
declare function setTimeout(callback: (...args: any[]) => void, ms?: number, ...args: any[]): number;
declare function clearTimeout(id?: number): void;
declare function setInterval(callback: (...args: any[]) => void, ms?: number, ...args: any[]): number;
declare function clearInterval(id?: number): void;
declare function queueMicrotask(callback: () => void): void;
declare function structuredClone<T>(value: T): T;
declare function atob(data: string): string;
declare function btoa(data: string): string;
declare const performance: { now(): number };
declare const crypto: {
  getRandomValues<T extends ArrayBufferView>(array: T): T;
  randomUUID(): string;
};
declare class TextEncoder {
  readonly encoding: "utf-8";
  encode(input?: string): Uint8Array;
  encodeInto(source: string, destination: Uint8Array): { read: number; written: number };
}
declare class TextDecoder {
  constructor(label?: string, options?: { fatal?: boolean; ignoreBOM?: boolean });
  readonly encoding: string;
  readonly fatal: boolean;
  readonly ignoreBOM: boolean;
  decode(input?: ArrayBufferView | ArrayBuffer, options?: { stream?: boolean }): string;
}
declare class URLSearchParams {
  constructor(init?: string | URLSearchParams | Record<string, string> | [string, string][]);
  readonly size: number;
  append(name: string, value: string): void;
  delete(name: string, value?: string): void;
  get(name: string): string | null;
  getAll(name: string): string[];
  has(name: string, value?: string): boolean;
  set(name: string, value: string): void;
  sort(): void;
  forEach(callback: (value: string, name: string, params: URLSearchParams) => void): void;
  keys(): IterableIterator<string>;
  values(): IterableIterator<string>;
  entries(): IterableIterator<[string, string]>;
  [Symbol.iterator](): IterableIterator<[string, string]>;
  toString(): string;
}
declare class URL {
  constructor(url: string | URL, base?: string | URL);
  static canParse(url: string | URL, base?: string | URL): boolean;
  static parse(url: string | URL, base?: string | URL): URL | null;
  href: string;
  readonly origin: string;
  protocol: string;
  username: string;
  password: string;
  host: string;
  hostname: string;
  port: string;
  pathname: string;
  search: string;
  readonly searchParams: URLSearchParams;
  hash: string;
  toString(): string;
  toJSON(): string;
}
declare class DOMException extends Error {
  constructor(message?: string, name?: string);
  readonly code: number;
}
