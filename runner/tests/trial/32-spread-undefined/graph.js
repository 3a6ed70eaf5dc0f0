export const meta = {name: 'spread-undefined', slug: 'spread-undefined', version: '1'};
export default async function (args, g) {
  return [...args.list, "end"];
}
