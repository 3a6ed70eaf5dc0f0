export const meta = {name: 'nested-broken-child', slug: 'nested-broken-child', version: '1'};
export default async function (args, g) {
  return await g.graph("child", {});
}
