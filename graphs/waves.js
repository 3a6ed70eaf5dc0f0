/** @type {GraphMeta} */
export const meta = {
  name: "Research in waves",
  slug: "waves",
  version: "1.0.0",
  description:
    "Runs waves of parallel agents on a topic until the token cap refuses the next wave, and returns what the finished waves found.",
};

/** @param {GraphArgs} args @param {G} g */
export default async function (args, g) {
  const waves = args.waves ?? 5;
  const width = args.width ?? 2;
  const facts = [];
  for (let wave = 1; wave <= waves; wave++) {
    try {
      const replies = await Promise.all(
        Array.from({ length: width }, (_, i) =>
          g.agent({ label: `wave-${wave}`, prompt: `Wave ${wave}, angle ${i + 1}: one new fact about ${args.topic}` }),
        ),
      );
      facts.push(...replies.map((r) => r.text));
    } catch (e) {
      if (e.code !== "budget_exhausted") throw e;
      g.log(`wave ${wave} refused: ${e.message}`);
      return { waves_completed: wave - 1, facts, stopped: "budget_exhausted", budget: g.budget() };
    }
  }
  return { waves_completed: waves, facts, budget: g.budget() };
}
