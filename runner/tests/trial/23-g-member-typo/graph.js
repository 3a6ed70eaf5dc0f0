export const meta = {name: 'g-member-typo', slug: 'g-member-typo', version: '1'};
export default async function (args, g) {
  return g.agnet({prompt: "hi"});
}
