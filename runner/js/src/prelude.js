// The graph prelude: turns the host's start-*/wait-any functions into the `g` object a graph
// receives. Shared, unchanged, by the in-process boa engine and the wasm guest.
//
// Nothing here is a security boundary. Every limit (token cap, approvals, folder confinement,
// nesting depth, cancellation) is enforced by the host behind `host.*`; a script that replaces
// these functions, or reaches the natives some other way, only changes its own view.
(function (host) {
  "use strict";
  const PromiseCtor = Promise;
  const ErrorCtor = Error;
  const parse = JSON.parse;
  const stringify = JSON.stringify;
  const freeze = Object.freeze;
  const defineProperty = Object.defineProperty;
  const isInteger = Number.isInteger;
  const floor = Math.floor;
  const apply = Reflect.apply;
  const isArrayValue = Array.isArray;
  const keysOf = Object.keys;
  const MAX_RETRY_ATTEMPTS = 10;
  const MAX_SLEEP_MS = 600000;

  // handle -> [resolve, reject] of the promise waiting for that handle's outcome. A bare object
  // with no prototype, so a script patching Map or Object.prototype cannot disturb it.
  const waiting = Object.create(null);

  function rejected(error) {
    return new PromiseCtor((_, reject) => reject(error));
  }

  function failure(code, message) {
    const e = new ErrorCtor(message);
    e.code = code;
    return e;
  }

  // handle -> [what, stack] of each agent, tool and nested graph started and not yet settled,
  // with the stack where the graph started it: what is left when the graph returns is named
  // in the trace, at that place.
  const startedAt = Object.create(null);

  // A start-* native answers with a handle number, or with {code, message} when refused.
  // `what` (an agent, a tool...) marks work worth a warning when it is still running at return.
  // A timer passes the stack of its setTimeout or setInterval call, and "timer".
  function started(answer, what, stack, kind) {
    if (typeof answer === "number") {
      if (what !== undefined) {
        startedAt[answer] = [what, stack === undefined ? stackOf(new ErrorCtor()) : stack, kind];
      }
      return new PromiseCtor((resolve, reject) => {
        waiting[answer] = [resolve, reject];
      });
    }
    return rejected(failure(answer.code, answer.message));
  }

  // Called by the driver with the outcome of one handle: JSON text, or {code, message}.
  function settle(handle, ok, outcome) {
    const entry = waiting[handle];
    delete startedAt[handle];
    if (entry === undefined) {
      return;
    }
    delete waiting[handle];
    if (ok) {
      entry[0](parse(outcome));
    } else {
      entry[1](failure(outcome.code, outcome.message));
    }
  }

  function describe(value) {
    if (typeof value === "string") {
      return value;
    }
    if (typeof value === "number") {
      // JSON would say null for NaN and the infinities.
      return String(value);
    }
    if (value instanceof ErrorCtor) {
      // A host refusal carries a text code; a DOMException's numeric one says nothing more.
      return typeof value.code === "string" && value.code !== "" ? value.code + ": " + value.message : String(value);
    }
    try {
      const text = stringify(value);
      return text === undefined ? String(value) : text;
    } catch (_) {
      return String(value);
    }
  }

  function optionalString(opts, key, what) {
    const value = opts[key];
    if (value === undefined || value === null) {
      return null;
    }
    if (typeof value !== "string") {
      throw failure("invalid", what + "." + key + " must be a string");
    }
    return value;
  }

  function optionalCount(opts, key, what) {
    const value = opts[key];
    if (value === undefined || value === null) {
      return null;
    }
    if (!isInteger(value) || value < 1) {
      throw failure("invalid", what + "." + key + " must be a positive integer, got " + describe(value));
    }
    return value;
  }

  // The options each `g` function takes. A key outside its list is refused, naming the nearest
  // known one: a typo (`temprature`, `attempt`, `max_tokens`) would otherwise be ignored and
  // the call run with defaults the author did not mean.
  const AGENT_KEYS = ["prompt", "system", "model", "label", "maxTokens", "tools", "maxTurns"];
  const RETRY_KEYS = ["attempts", "delayMs"];
  // Keys authors bring from other APIs, with what to do instead: suggested when nearest.
  const ELSEWHERE = Object.create(null);
  ELSEWHERE.temperature = "g.agent takes no temperature; set `temperature` in the provider's configuration";

  function normalized(key) {
    return key.toLowerCase().replace(/[_\-\s]/g, "");
  }

  // Edit distance, bounded: keys are short, and an option object has few of them.
  function distance(a, b) {
    if (a.length > 64 || b.length > 64) {
      return Math.max(a.length, b.length);
    }
    let row = [];
    for (let j = 0; j <= b.length; j++) row[j] = j;
    for (let i = 1; i <= a.length; i++) {
      let diagonal = row[0];
      row[0] = i;
      for (let j = 1; j <= b.length; j++) {
        const above = row[j];
        row[j] = Math.min(above + 1, row[j - 1] + 1, diagonal + (a[i - 1] === b[j - 1] ? 0 : 1));
        diagonal = above;
      }
    }
    return row[b.length];
  }

  // The known key `key` most likely meant: the same letters (`max_tokens`), a known key it
  // starts with (`systemPrompt`), or one a few edits away; undefined when none is close.
  function nearest(key, known) {
    const wanted = normalized(key);
    let best;
    let bestScore = Infinity;
    for (let i = 0; i < known.length; i++) {
      const candidate = normalized(known[i]);
      let score = distance(wanted, candidate);
      if (wanted.startsWith(candidate) || candidate.startsWith(wanted)) {
        score = Math.min(score, 1);
      }
      if (score < bestScore) {
        best = known[i];
        bestScore = score;
      }
    }
    const allowed = Math.max(2, floor(wanted.length / 3));
    return bestScore <= allowed ? best : undefined;
  }

  // Whether `list` holds `key`, without Array.prototype (a graph may have patched it: only the
  // messages below may suffer from that, never which calls pass).
  function holds(list, key) {
    for (let i = 0; i < list.length; i++) {
      if (list[i] === key) {
        return true;
      }
    }
    return false;
  }

  function checkKeys(opts, known, what, elsewhere) {
    const keys = keysOf(opts);
    for (let i = 0; i < keys.length; i++) {
      const key = keys[i];
      if (holds(known, key)) {
        continue;
      }
      const others = elsewhere === undefined ? [] : keysOf(elsewhere);
      const near = nearest(key, known.concat(others));
      let message = "unknown option `" + key + "` of " + what;
      if (near !== undefined) {
        message += "; did you mean `" + near + "`?";
        if (elsewhere !== undefined && near in elsewhere) {
          message += " " + elsewhere[near];
        }
      }
      throw failure("invalid", message + " (" + what + " takes " + known.join(", ") + ")");
    }
  }

  // A call given more arguments than its function takes: `g.tool(name, args, {timeout})`.
  function checkArity(count, most, what, usage) {
    if (count > most) {
      throw failure("invalid", what + " takes " + usage + "; the argument after those is not accepted");
    }
  }

  function jsonArgs(args, what) {
    const value = args === undefined ? {} : args;
    if (value === null || typeof value !== "object" || Array.isArray(value)) {
      throw failure("invalid", what + " arguments must be an object");
    }
    return stringify(value);
  }

  function agent(opts, ...extra) {
    try {
      checkArity(extra.length + 1, 1, "g.agent", "one options object (or a prompt string)");
      if (typeof opts === "string") {
        opts = { prompt: opts };
      }
      if (opts === null || typeof opts !== "object" || isArrayValue(opts)) {
        throw failure("invalid", "g.agent takes {prompt, system, model, label, maxTokens, tools, maxTurns}");
      }
      checkKeys(opts, AGENT_KEYS, "g.agent", ELSEWHERE);
      if (typeof opts.prompt !== "string" || opts.prompt.length === 0) {
        throw failure("invalid", "g.agent: prompt must be a non-empty string");
      }
      const tools = opts.tools === undefined || opts.tools === null ? [] : opts.tools;
      if (!Array.isArray(tools) || tools.some((t) => typeof t !== "string")) {
        throw failure("invalid", "g.agent: tools must be a list of tool names");
      }
      const request = {
        prompt: opts.prompt,
        system: optionalString(opts, "system", "g.agent"),
        model: optionalString(opts, "model", "g.agent"),
        label: optionalString(opts, "label", "g.agent"),
        max_tokens: optionalCount(opts, "maxTokens", "g.agent"),
        tools: tools,
        max_turns: optionalCount(opts, "maxTurns", "g.agent"),
      };
      const named = typeof request.label === "string" ? "an agent (label " + stringify(request.label) + ")" : "an agent";
      return started(host.startAgent(stringify(request)), named);
    } catch (e) {
      return rejected(e);
    }
  }

  function tool(name, args, ...extra) {
    try {
      checkArity(extra.length + 2, 2, "g.tool", "(name, args)");
      if (typeof name !== "string" || name.length === 0) {
        throw failure("invalid", "g.tool: the tool name must be a non-empty string");
      }
      return started(host.startTool(name, jsonArgs(args, "g.tool(" + name + ")")), "a tool call (" + name + ")");
    } catch (e) {
      return rejected(e);
    }
  }

  function graph(slug, args, ...extra) {
    try {
      checkArity(extra.length + 2, 2, "g.graph", "(slug, args)");
      if (typeof slug !== "string" || slug.length === 0) {
        throw failure("invalid", "g.graph: the slug must be a non-empty string");
      }
      return started(host.startGraph(slug, jsonArgs(args, "g.graph(" + slug + ")")), "a nested graph (" + slug + ")");
    } catch (e) {
      return rejected(e);
    }
  }

  function sleep(ms, ...extra) {
    if (extra.length > 0) {
      return rejected(failure("invalid", "g.sleep takes one argument, the milliseconds: g.sleep(100)"));
    }
    if (ms !== null && typeof ms === "object") {
      return rejected(failure("invalid", "g.sleep takes no options object, only the milliseconds: g.sleep(100)"));
    }
    if (!isInteger(ms) || ms < 0 || ms > MAX_SLEEP_MS) {
      return rejected(failure("invalid", "g.sleep: ms must be an integer from 0 to " + MAX_SLEEP_MS + ", got " + (typeof ms === "string" ? stringify(ms) + ", a string" : describe(ms))));
    }
    return started(host.startSleep(ms));
  }

  // Errors a retry cannot fix: retrying them would only repeat a refusal.
  const FINAL_CODES = ["cancelled", "budget_exhausted", "denied"];

  async function retry(fn, opts, ...extra) {
    checkArity(extra.length + 2, 2, "g.retry", "(fn, {attempts, delayMs})");
    if (typeof fn !== "function") {
      throw failure("invalid", "g.retry: the first argument must be a function");
    }
    const options = opts === undefined || opts === null ? {} : opts;
    if (typeof options !== "object" || isArrayValue(options)) {
      const example = isInteger(opts) ? "{attempts: " + opts + "}" : "{attempts: 3, delayMs: 100}";
      throw failure("invalid", "g.retry: the options must be an object, got " + describe(opts) + "; write g.retry(fn, " + example + ")");
    }
    checkKeys(options, RETRY_KEYS, "g.retry");
    const attempts = options.attempts === undefined ? 3 : options.attempts;
    if (!isInteger(attempts) || attempts < 1 || attempts > MAX_RETRY_ATTEMPTS) {
      throw failure("invalid", "g.retry: attempts must be an integer from 1 to " + MAX_RETRY_ATTEMPTS + ", got " + describe(attempts));
    }
    const delayMs = options.delayMs === undefined ? 0 : options.delayMs;
    if (!isInteger(delayMs) || delayMs < 0 || delayMs > MAX_SLEEP_MS) {
      throw failure("invalid", "g.retry: delayMs must be an integer from 0 to " + MAX_SLEEP_MS);
    }
    let last;
    for (let attempt = 1; attempt <= attempts; attempt++) {
      try {
        return await fn(attempt);
      } catch (e) {
        last = e;
        if (e instanceof ErrorCtor && FINAL_CODES.includes(e.code)) {
          throw e;
        }
        host.log("retry: attempt " + attempt + "/" + attempts + " failed: " + describe(e));
        if (attempt < attempts && delayMs > 0) {
          await sleep(delayMs);
        }
      }
    }
    throw last;
  }

  function log(...parts) {
    host.log(parts.map(describe).join(" "));
  }

  function budget() {
    return { used: host.tokensUsed(), cap: host.tokenCap() };
  }

  // Calls a callback the host's event loop owns (a timer's, a microtask's): one that throws, or
  // returns a promise that rejects, is logged as `what: the callback failed: ...` (a warning at
  // its place in the graph's code when it failed there), and the run goes on, as in other hosts.
  function runCallback(what, callback, args) {
    const failed = (e) => {
      const said = describe(e);
      // At the place in the graph's code that failed, when it failed there.
      const at = host.locate(said, stackOf(e));
      host.log(at === undefined
        ? what + ": the callback failed: " + said
        : "warning: " + at[0] + what + ": the callback failed: " + at[1]);
    };
    try {
      const returned = callback(...args);
      if (returned instanceof PromiseCtor) {
        returned.then(undefined, failed);
      }
    } catch (e) {
      failed(e);
    }
  }

  // setTimeout, setInterval and their clears, for scripts written for other JavaScript hosts,
  // on the host's timer (the same as g.sleep). A callback runs once its timer fires unless
  // cleared first; one that throws (or returns a promise that rejects) is logged. An interval
  // is armed again after each callback, so it never runs two at once. A timer still pending
  // when the graph's function returns never fires: the run is over. Timeouts and intervals
  // share one set of ids, and either clear function clears either, as in browsers.
  const timers = Object.create(null);
  let lastTimer = 0;

  function startTimer(what, callback, ms, args, repeat) {
    if (typeof callback !== "function") {
      throw new TypeError(what + ": the callback must be a function (a string is not run)");
    }
    // Like other hosts: a missing, negative or non-numeric delay is 0, a fraction rounds down;
    // an interval waits at least 1 ms between callbacks, as in Node.
    let delay = +ms;
    delay = delay > 0 ? floor(delay) : 0;
    if (delay > MAX_SLEEP_MS) {
      throw failure("invalid", what + ": the delay must be at most " + MAX_SLEEP_MS + " ms, got " + describe(ms));
    }
    if (repeat && delay < 1) {
      delay = 1;
    }
    const id = ++lastTimer;
    // Where the graph set it, for the warning when it is still pending at the end.
    const setAt = stackOf(new ErrorCtor());
    const described = what + " of " + delay + " ms";
    // Starts one wait for the timer. The first that the host refuses (at module top level, say)
    // fails setTimeout or setInterval; a later one ends the interval with a log line.
    const arm = () => {
      const answer = host.startSleep(delay);
      if (typeof answer !== "number") {
        delete timers[id];
        return failure(answer.code, what + ": " + answer.message);
      }
      // The host's handle of the wait: cleared, or armed again, the timer holds another.
      timers[id] = answer;
      started(answer, described, setAt, "timer").then(
        () => {
          if (timers[id] !== answer) {
            return;
          }
          if (!repeat) {
            delete timers[id];
          }
          runCallback(what, callback, args);
          if (repeat && timers[id] === answer) {
            const refused = arm();
            if (refused) {
              host.log(what + ": the interval stopped: " + describe(refused));
            }
          }
        },
        // The run was cancelled: the callback never runs.
        () => {
          delete timers[id];
        },
      );
      return undefined;
    };
    timers[id] = true;
    const refused = arm();
    if (refused) {
      throw refused;
    }
    return id;
  }

  function setTimeout(callback, ms, ...args) {
    return startTimer("setTimeout", callback, ms, args, false);
  }

  function setInterval(callback, ms, ...args) {
    return startTimer("setInterval", callback, ms, args, true);
  }

  function clearTimeout(id) {
    if (typeof id === "number") {
      // A cleared timer is not pending work.
      const handle = timers[id];
      if (typeof handle === "number") {
        delete startedAt[handle];
      }
      delete timers[id];
    }
  }

  function clearInterval(id) {
    clearTimeout(id);
  }

  // The web platform functions of web.js take milliseconds to compile, so they are compiled
  // when a graph first touches one of them (or ahead of time, through loadWeb). Each name stays
  // an accessor on globalThis for good: its getter answers web.js's value (compiling web.js on
  // the first touch), or the graph's own once it assigned one; deleting it deletes it. Loading
  // leaves a replaced or deleted one as the graph left it.
  //
  // They are never turned into data properties: boa 0.22 caches a global read by the object's
  // shape after the read and the slot before it, so redefining properties while the first
  // read's getter runs would leave that reading site on a wrong slot, and its next read would
  // answer another global (a second `btoa(s)` in a loop called setTimeout).
  const webValues = Object.create(null);
  function installWeb(name, value) {
    if (!(name in webValues)) {
      webValues[name] = value;
    }
  }
  let webLoaded = false;
  function loadWeb() {
    if (!webLoaded) {
      webLoaded = true;
      host.loadWeb({
        log: host.log,
        randomBytes: host.randomBytes,
        monotonicNow: host.monotonicNow,
        runCallback,
        install: installWeb,
      });
    }
  }
  const WEB_NAMES = [
    "DOMException", "TextDecoder", "TextEncoder", "URL", "URLSearchParams", "atob", "btoa", "crypto", "performance",
    "queueMicrotask", "structuredClone",
  ];
  for (let i = 0; i < WEB_NAMES.length; i++) {
    const name = WEB_NAMES[i];
    defineProperty(globalThis, name, {
      get() {
        loadWeb();
        return webValues[name];
      },
      set(value) {
        webValues[name] = value;
      },
      enumerable: false,
      configurable: true,
    });
  }

  // console, with every method other JavaScript hosts give it, so that a graph written for one
  // does not fail on console.time or console.table. Each writes one line to the run's log (the
  // trace); group() indents the console lines after it.
  let indent = "";
  const counts = Object.create(null);
  const clocks = Object.create(null);
  const now = Date.now;
  function consoleLog(...parts) {
    host.log(indent + parts.map(describe).join(" "));
  }
  function labelOf(label) {
    return label === undefined ? "default" : String(label);
  }
  function elapsed(label, end, parts) {
    const key = labelOf(label);
    if (!(key in clocks)) {
      consoleLog('Timer "' + key + '" does not exist');
      return;
    }
    consoleLog(key + ": " + (now() - clocks[key]) + " ms", ...parts);
    if (end) {
      delete clocks[key];
    }
  }
  function group(...parts) {
    if (parts.length > 0) {
      consoleLog(...parts);
    }
    indent += "  ";
  }
  const console = freeze({
    log: consoleLog,
    info: consoleLog,
    warn: consoleLog,
    error: consoleLog,
    debug: consoleLog,
    dir: consoleLog,
    dirxml: consoleLog,
    table: consoleLog,
    trace: (...parts) => consoleLog("Trace:", ...parts),
    assert(condition, ...parts) {
      if (!condition) {
        consoleLog(parts.length > 0 ? "Assertion failed:" : "Assertion failed", ...parts);
      }
    },
    count(label) {
      const key = labelOf(label);
      counts[key] = (counts[key] || 0) + 1;
      consoleLog(key + ": " + counts[key]);
    },
    countReset(label) {
      delete counts[labelOf(label)];
    },
    group,
    groupCollapsed: group,
    groupEnd() {
      indent = indent.slice(2);
    },
    time(label) {
      const key = labelOf(label);
      if (key in clocks) {
        consoleLog('Timer "' + key + '" already exists');
        return;
      }
      clocks[key] = now();
    },
    timeLog: (label, ...parts) => elapsed(label, false, parts),
    timeEnd: (label) => elapsed(label, true, []),
  });

  // Array.fromAsync (ES2024), which boa 0.22 lacks: an array from an async iterable, a sync
  // iterable (each value awaited) or an array-like, each value passed through mapfn and awaited.
  const construct = Reflect.construct;
  function isConstructor(f) {
    if (typeof f !== "function") return false;
    try {
      construct(String, [], f);
      return true;
    } catch {
      return false;
    }
  }
  function put(array, index, value) {
    defineProperty(array, index, { value, writable: true, enumerable: true, configurable: true });
  }
  async function fromAsync(items, mapfn = undefined, thisArg = undefined) {
    if (mapfn !== undefined && typeof mapfn !== "function") {
      throw new TypeError("Array.fromAsync: the mapping function must be a function");
    }
    if (items === null || items === undefined) {
      throw new TypeError(`Array.fromAsync: ${items} is not iterable or array-like`);
    }
    const C = this;
    const mapped = (value, k) => (mapfn === undefined ? value : apply(mapfn, thisArg, [value, k]));
    if (items[Symbol.asyncIterator] != null || items[Symbol.iterator] != null) {
      const array = isConstructor(C) ? new C() : [];
      let k = 0;
      for await (const value of items) {
        put(array, k, await mapped(value, k));
        k++;
      }
      array.length = k;
      return array;
    }
    const arrayLike = Object(items);
    const length = Math.min(Math.max(Math.trunc(Number(arrayLike.length)) || 0, 0), Number.MAX_SAFE_INTEGER);
    const array = isConstructor(C) ? new C(length) : new Array(length);
    for (let k = 0; k < length; k++) {
      put(array, k, await mapped(await arrayLike[k], k));
    }
    array.length = length;
    return array;
  }
  if (typeof Array.fromAsync !== "function") {
    defineProperty(Array, "fromAsync", { value: fromAsync, writable: true, enumerable: false, configurable: true });
  }

  // The text of `value`.stack, through Error.prototype's own getter (a graph that replaced
  // its errors' `stack` only hides its own location), or undefined.
  const stackDescriptor = Object.getOwnPropertyDescriptor(ErrorCtor.prototype, "stack");
  const stackGetter = stackDescriptor === undefined ? undefined : stackDescriptor.get;
  function stackOf(value) {
    if (typeof stackGetter !== "function" || value === null || typeof value !== "object") {
      return undefined;
    }
    try {
      const text = apply(stackGetter, value, []);
      return typeof text === "string" ? text : undefined;
    } catch (_) {
      return undefined;
    }
  }

  // The result as JSON text. JSON.stringify alone turns a Map, a Set, a Promise, a WeakMap or
  // a WeakSet into {} whatever it holds, and fails on a BigInt or a cycle without saying
  // where; so when the text holds a "{}" (all of those give one) or stringify throws, the
  // result is walked again to name the path of the first such value, and that is thrown.
  // Most results hold no "{}": they cost one search of the text.
  const EMPTY_LOOKING = [
    [Map, "a Map"], [Set, "a Set"], [Promise, "a Promise (await it before returning)"],
    [WeakMap, "a WeakMap"], [WeakSet, "a WeakSet"],
  ];
  const includes = String.prototype.includes;
  const isArray = Array.isArray;
  function pathOf(parent, key) {
    if (isArray(parent.holder)) {
      return parent.path + "[" + key + "]";
    }
    return /^[A-Za-z_$][\w$]*$/.test(key) ? parent.path + "." + key : parent.path + "[" + stringify(key) + "]";
  }
  function unjsonable(value) {
    // object -> {holder, path, up}: where each object being written sits, and its parent's.
    const places = new Map();
    let found;
    function check(key, v) {
      if (found !== undefined) {
        return undefined;
      }
      const parent = places.get(this);
      if (parent === undefined && key !== "") {
        return v;
      }
      const path = parent === undefined ? "result" : pathOf(parent, key);
      if (typeof v === "bigint") {
        found = path + ": a BigInt cannot be turned into JSON; return it as a string or a number";
        return undefined;
      }
      if (typeof v === "function") {
        found = path + ": a function cannot be turned into JSON (it would be dropped); return its result, or data";
        return undefined;
      }
      if (v === null || typeof v !== "object") {
        return v;
      }
      for (let i = 0; i < EMPTY_LOOKING.length; i++) {
        if (v instanceof EMPTY_LOOKING[i][0]) {
          found = path + ": " + EMPTY_LOOKING[i][1] + " cannot be turned into JSON (it would become {}); return an object or an array";
          return undefined;
        }
      }
      for (let at = parent; at !== undefined; at = at.up) {
        if (at.holder === v) {
          found = path + ": a cycle: this is " + at.path + " again; return a copy without the back reference";
          return undefined;
        }
      }
      places.set(v, { holder: v, path, up: parent });
      return v;
    }
    try {
      stringify(value, check);
    } catch (_) {
      // The walk stops at the first problem; what stringify made of the rest does not matter.
    }
    return found;
  }
  // JSON.stringify drops a function without a trace in the text, so a result up to this many
  // characters is walked once more to find one; a larger one is passed as it is, since walking
  // it with a replacer costs seconds in the interpreter.
  const MAX_FUNCTION_CHECK_CHARS = 1000000;
  function holdsFunction(value) {
    let seen = false;
    stringify(value, (_, v) => {
      if (typeof v === "function") {
        seen = true;
        return undefined;
      }
      return seen ? undefined : v;
    });
    return seen;
  }
  function resultText(value) {
    let text;
    try {
      text = stringify(value);
    } catch (e) {
      const named = unjsonable(value);
      throw named === undefined ? e : named;
    }
    const mayDrop = text === undefined || text.length <= MAX_FUNCTION_CHECK_CHARS;
    if (typeof value === "function" || (mayDrop && value !== null && typeof value === "object" && holdsFunction(value))) {
      const named = unjsonable(value);
      if (named !== undefined) {
        throw named;
      }
    }
    if (typeof text === "string" && apply(includes, text, ["{}"])) {
      const named = unjsonable(value);
      if (named !== undefined) {
        throw named;
      }
    }
    return text;
  }

  // Calling a member of `g` that does not exist (`g.agnet(...)`) names the ones that do. The
  // guard is g's prototype, so reading a real member never reaches it. A missing member reads
  // as a function that throws when called: thrown from the call, the error's innermost frame in
  // the graph is the call's line (boa gives a property read no position of its own).
  const G_MEMBERS = "agent, tool, graph, retry, sleep, log, budget";
  const PASSED_THROUGH = ["then", "toJSON", "constructor", "asymmetricMatch", "nodeType", "$$typeof"];
  const TypeErrorCtor = TypeError;
  const guard = new Proxy(Object.prototype, {
    get(target, key, receiver) {
      if (typeof key !== "string" || key in target || PASSED_THROUGH.includes(key)) {
        return Reflect.get(target, key, receiver);
      }
      return function missing() {
        throw new TypeErrorCtor("g." + key + " is not a function; g has " + G_MEMBERS);
      };
    },
  });
  const g = freeze(Object.assign(Object.create(guard), { agent, tool, graph, sleep, retry, log, budget }));
  globalThis.console = console;
  globalThis.setTimeout = setTimeout;
  globalThis.clearTimeout = clearTimeout;
  globalThis.setInterval = setInterval;
  globalThis.clearInterval = clearInterval;
  // [what, stack] of each agent, tool and nested graph started and never settled, in start
  // order (integer keys list in ascending order).
  function unsettled() {
    const keys = keysOf(startedAt);
    const out = [];
    for (let i = 0; i < keys.length; i++) {
      out[i] = startedAt[keys[i]];
    }
    return out;
  }
  return freeze({ g, settle, stringify, resultText, stackOf, describe, loadWeb, unsettled });
})
