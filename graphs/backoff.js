/** @type {GraphMeta} */
export const meta = {
  name: "Backoff",
  slug: "backoff",
  version: "1.0.0",
  description: "Polls an agent until it says ready, waiting a random (full-jitter) exponential backoff between attempts, and reports when each attempt ran",
};

// Time and randomness come from the run: under `--seed` and `--clock fixed:...` (as in
// backoff.test.json) every run gives the same waits, timestamps and id, and the waits take no
// real time.
/** @param {GraphArgs} args @param {G} g */
export default async function (args, g) {
  const attempts = args.attempts ?? 5;
  const baseMs = args.base_ms ?? 1000;
  const started = Date.now();
  const log = [];
  for (let i = 0; i < attempts; i++) {
    const reply = await g.agent({ prompt: `Is the deployment ready? (check ${i + 1})`, label: "status" });
    log.push({ attempt: i + 1, at_ms: Date.now() - started, text: reply.text });
    if (reply.text === "ready") {
      break;
    }
    // Full jitter: anywhere from 0 to base * 2^i.
    const wait = Math.floor(Math.random() * baseMs * 2 ** i);
    await new Promise((resolve) => setTimeout(resolve, wait));
  }
  return {
    id: crypto.randomUUID(),
    started: new Date(started).toISOString(),
    attempts: log,
    elapsed_ms: performance.now(),
  };
}
