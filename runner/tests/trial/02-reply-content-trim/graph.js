export const meta = {name: 'reply-content-trim', slug: 'reply-content-trim', version: '1'};
export default async function (args, g) {
  const reply = await g.agent({prompt: "Say hi"});
  const words = reply.content.trim().split(" ");
  return words;
}
