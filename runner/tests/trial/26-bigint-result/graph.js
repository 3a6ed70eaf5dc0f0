export const meta = {name: 'bigint-result', slug: 'bigint-result', version: '1'};
export default async function (args, g) {
  return {items: [{n: 1}, {n: 3n}]};
}
