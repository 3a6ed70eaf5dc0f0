export const meta = {name: 'nested-slug-typo', slug: 'nested-slug-typo', version: '1'};
export default async function (args, g) {
  return await g.graph("sumary", {});
}
