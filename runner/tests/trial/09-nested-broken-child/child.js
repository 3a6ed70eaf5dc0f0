export const meta = {name: 'child', slug: 'child', version: '1'};
export default async function (args, g) {
  return [1, 2;
}
