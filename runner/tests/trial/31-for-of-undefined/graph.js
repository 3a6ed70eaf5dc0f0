export const meta = {name: 'for-of-undefined', slug: 'for-of-undefined', version: '1'};
export default async function (args, g) {
  const out = [];
  for (const item of args.items) out.push(item);
  return out;
}
