/** @type {GraphMeta} */
export const meta = {
  name: "Weekly report",
  slug: "weekly-report",
  version: "1.0.0",
  description: "Runs the research fan-out graph on the week's questions, titles the brief, and files it under reports/.",
  args: {
    type: "object",
    properties: {
      week: { type: "string", pattern: "^[0-9]{4}-W[0-9]{2}$", description: "The ISO week, like 2026-W48." },
      questions: { type: "array", items: { type: "string" } },
    },
    required: ["week", "questions"],
  },
};

/** @param {GraphArgs} args @param {G} g */
export default async function (args, g) {
  if (typeof args.week !== "string" || !/^[0-9]{4}-W[0-9]{2}$/.test(args.week)) {
    throw new Error("args.week must look like 2026-W48");
  }
  // A nested graph: same token budget, approvals and cancellation as this run.
  const research = await g.graph("fanout", { questions: args.questions });
  const title = await g.agent({ label: "title", prompt: `Give a five-word title for: ${research.brief}`, maxTokens: 20 });
  const path = `reports/${args.week}.md`;
  await g.tool("fs.write", { path, text: `# ${title.text}\n\n${research.brief}\n` });
  return { path, title: title.text, sources: research.sources };
}
