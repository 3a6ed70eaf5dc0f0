export const meta = {name: 'json-parse-reply', slug: 'json-parse-reply', version: '1'};
export default async function (args, g) {
  const reply = await g.agent({prompt: "give JSON"});
  return JSON.parse(reply.text);
}
