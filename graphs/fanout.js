/** @type {GraphMeta} */
export const meta = {
  name: "Research fan-out",
  slug: "fanout",
  version: "1.0.0",
  description: "Asks one agent per question in parallel, then merges the answers into one brief.",
};

const MAX_QUESTIONS = 16;

/** @param {GraphArgs} args @param {G} g */
export default async function (args, g) {
  const questions = args.questions;
  if (!Array.isArray(questions) || questions.length === 0 || questions.length > MAX_QUESTIONS) {
    throw new Error(`args.questions must be a list of 1 to ${MAX_QUESTIONS} questions`);
  }
  // One agent per question, all at once; the host runs at most max_concurrency at a time.
  const answers = await Promise.all(
    questions.map((q, i) => g.agent({ label: `research-${i + 1}`, prompt: `Answer in one sentence: ${q}` })),
  );
  const findings = answers.map((a, i) => `${i + 1}. ${a.text}`).join("\n");
  const merged = await g.agent({ label: "merge", prompt: `Merge these findings into one short brief:\n${findings}` });
  return { brief: merged.text, sources: answers.length };
}
