/** @type {GraphMeta} */
export const meta = {
  name: "Ticket triage",
  slug: "triage",
  version: "1.0.0",
  description:
    "Classifies a support ticket. Urgent tickets get a drafted reply and an escalation note written to notes/; routine ones a short answer.",
  // The arguments' JSON Schema: `runner run --args` and the relay's run_graph_session refuse
  // arguments that do not fit it before the graph starts, naming the failing path.
  args: {
    type: "object",
    properties: {
      ticket: { type: "string", description: "The ticket's text." },
      id: { type: "string", description: "The ticket's id; names the escalation note." },
    },
    required: ["ticket"],
    additionalProperties: false,
  },
};

/** @param {GraphArgs} args @param {G} g */
export default async function (args, g) {
  if (typeof args.ticket !== "string" || args.ticket.length === 0) {
    throw new Error("args.ticket must be a non-empty string");
  }
  const verdict = await g.agent({
    label: "classify",
    system: "You classify support tickets. Answer with one word: urgent or routine.",
    prompt: `Classify this ticket:\n${args.ticket}`,
    maxTokens: 5,
  });
  if (!verdict.text.toLowerCase().includes("urgent")) {
    const answer = await g.agent({
      label: "answer",
      prompt: `Write a short, friendly answer to this ticket:\n${args.ticket}`,
    });
    return { priority: "routine", reply: answer.text };
  }
  // Urgent: draft the customer reply and the on-call note at the same time.
  const [reply, escalation] = await Promise.all([
    g.agent({ label: "reply", prompt: `Draft an apologetic reply promising a fix today:\n${args.ticket}` }),
    g.agent({ label: "escalate", prompt: `Write a two-line escalation note for the on-call engineer:\n${args.ticket}` }),
  ]);
  const id = args.id ?? "ticket";
  const note = `notes/urgent-${id}.md`;
  await g.tool("fs.write", { path: note, text: `# Urgent: ${id}\n\n${escalation.text}\n` });
  g.log(`escalated ${id}`);
  return { priority: "urgent", reply: reply.text, note };
}
