export const meta = {name: 'cycle-result', slug: 'cycle-result', version: '1'};
export default async function (args, g) {
  const node = {name: "a"};
  node.self = node;
  return node;
}
