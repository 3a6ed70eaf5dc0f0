export const meta = {name: 'syntax-missing-brace', slug: 'syntax-missing-brace', version: '1'};
export default async function (args, g) {
  if (args.x) {
    return 1;
  return 2;
}
