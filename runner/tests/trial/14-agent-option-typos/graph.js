export const meta = {name: 'agent-option-typos', slug: 'agent-option-typos', version: '1'};
export default async function (args, g) {
  const reply = await g.agent({prompt: "hi", max_tokens: 10, systemPrompt: "be brief", temprature: 0});
  return reply.text;
}
