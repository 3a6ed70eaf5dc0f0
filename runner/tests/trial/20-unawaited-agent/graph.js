export const meta = {name: 'unawaited-agent', slug: 'unawaited-agent', version: '1'};
export default async function (args, g) {
  g.agent({prompt: "summarize"});
  return "done";
}
