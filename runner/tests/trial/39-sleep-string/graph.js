export const meta = {name: 'sleep-string', slug: 'sleep-string', version: '1'};
export default async function (args, g) {
  await g.sleep("100");
  return "slept";
}
