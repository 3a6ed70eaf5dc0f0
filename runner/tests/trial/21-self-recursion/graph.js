export const meta = {name: 'self-recursion', slug: 'self-recursion', version: '1'};
export default async function (args, g) {
  return await g.graph("self-recursion", {});
}
