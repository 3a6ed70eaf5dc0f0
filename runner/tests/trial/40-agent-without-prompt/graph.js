export const meta = {name: 'agent-without-prompt', slug: 'agent-without-prompt', version: '1'};
export default async function (args, g) {
  const reply = await g.agent({system: "be brief"});
  return reply.text;
}
