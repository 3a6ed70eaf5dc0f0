// A TypeScript graph: `runner run graphs/agenda.ts` runs it as it is, with no build step. The
// types are erased on the host (blanked to spaces), so every error points at this file's own
// line and column; `runner check --types graphs/agenda.ts` type-checks it against graph.d.ts.

export const meta = {
  name: "Meeting agenda",
  slug: "agenda",
  version: "1.0.0",
  description: "Asks one agent per topic for a time estimate in parallel, then orders the topics into an agenda.",
  args: {
    type: "object",
    properties: {
      topics: { type: "array", items: { type: "string" }, minItems: 1, maxItems: 8 },
      minutes: { type: "integer", minimum: 5, maximum: 240 },
    },
    required: ["topics"],
  },
} satisfies GraphMeta;

interface Item {
  topic: string;
  minutes: number;
}

type Agenda = { items: Item[]; total: number; over: boolean };

const DEFAULT_MINUTES = 60;

/** The first whole number in `text`, or `fallback`. */
function firstNumber(text: string, fallback: number = 10): number {
  const found = /\d+/.exec(text);
  return found ? Number(found[0]) : fallback;
}

/** `items` sorted by `key`, shortest first; the input is left as it is. */
function sortedBy<T>(items: readonly T[], key: (item: T) => number): T[] {
  return [...items].sort((a, b) => key(a) - key(b));
}

export default async function (args: GraphArgs, g: G): Promise<Agenda> {
  const topics = args.topics as string[];
  const budget: number = (args.minutes as number | undefined) ?? DEFAULT_MINUTES;
  const replies = await Promise.all(
    topics.map((topic, i) =>
      g.agent({ label: `estimate-${i + 1}`, prompt: `Minutes needed to discuss: ${topic}? Answer with a number.` }),
    ),
  );
  const items = sortedBy<Item>(
    replies.map((reply: AgentReply, i): Item => ({ topic: topics[i], minutes: firstNumber(reply.text) })),
    (item) => item.minutes,
  );
  const total = items.reduce((sum, item) => sum + item.minutes, 0);
  g.log(`agenda: ${items.length} topics, ${total} of ${budget} minutes`);
  return { items, total, over: total > budget };
}
